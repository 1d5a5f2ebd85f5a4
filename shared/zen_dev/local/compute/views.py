"""Render the world's MIGs, managed instances, errors and operations as Compute API JSON."""

from __future__ import annotations

import re
from typing import Any

from zen_dev.local.compute import resources as r
from zen_dev.local.compute.model import Instance, Mig, Operation
from zen_dev.local.compute.world import World


def mig_resource(world: World, mig: Mig) -> dict[str, Any]:
    p, spec = world.project, mig.spec
    actions = [i.action for i in mig.instances.values()]
    return {
        "kind": "compute#instanceGroupManager",
        "id": str(mig.id),
        "creationTimestamp": world.ts.at(mig.created_t),
        "name": mig.name,
        "description": f"Zen local stand-in MIG for {spec.machine_type}",
        "region": r.region_url(p, spec.region),
        "distributionPolicy": {
            "zones": [{"zone": r.zone_url(p, z)} for z in spec.zones],
            "targetShape": "ANY_SINGLE_ZONE" if spec.single_zone else "ANY",
        },
        "instanceTemplate": r.template_url(p, mig.name),
        "versions": [{"instanceTemplate": r.template_url(p, mig.name)}],
        "instanceGroup": r.instance_group_url(p, spec.region, mig.name),
        "baseInstanceName": mig.name,
        "fingerprint": f"{mig.id:x}"[-12:],
        "currentActions": r.actions_summary(actions),
        "status": {
            "isStable": all(a == "NONE" for a in actions),
            "versionTarget": {"isReached": True},
            "stateful": {"hasStatefulConfig": False, "perInstanceConfigs": {"allEffective": True}},
        },
        "targetSize": mig.target_size,
        "listManagedInstancesResults": "PAGINATED",
        "selfLink": r.mig_url(p, spec.region, mig.name),
        "updatePolicy": {"type": "OPPORTUNISTIC", "instanceRedistributionType": "NONE"},
    }


def managed_instance(world: World, inst: Instance) -> dict[str, Any]:
    p = world.project
    item: dict[str, Any] = {
        "instance": r.instance_url(p, inst.zone, inst.name),
        "name": inst.name,
        "currentAction": inst.action,
        "version": {"instanceTemplate": r.template_url(p, inst.mig.name)},
    }
    if inst.vm_id is not None:
        item["id"] = str(inst.vm_id)
    status = inst.status(world.now)
    if status is not None:
        item["instanceStatus"] = status
    if inst.errors:
        item["lastAttempt"] = {"errors": {"errors": [{"code": c, "message": m} for c, m in inst.errors]}}
    return item


def managed_instances(world: World, mig: Mig) -> list[dict[str, Any]]:
    ordered = sorted(mig.instances.values(), key=lambda i: i.seq)
    return [managed_instance(world, i) for i in ordered]


def operation_resource(world: World, op: Operation) -> dict[str, Any]:
    done = world.now >= op.done_t
    body: dict[str, Any] = {
        "kind": "compute#operation",
        "id": str(op.id),
        "name": op.name,
        "operationType": op.op_type,
        "targetLink": op.target_link,
        "targetId": str(op.target_id),
        "status": "DONE" if done else "RUNNING",
        "user": "zen-local-standin@zen_dev.local",
        "progress": 100 if done else 0,
        "insertTime": world.ts.at(op.insert_t),
        "startTime": world.ts.at(op.insert_t),
        "selfLink": r.operation_url(op.project, op.region, op.name),
        "region": r.region_url(op.project, op.region),
    }
    if done:
        body["endTime"] = world.ts.at(op.done_t)
    return body


def mig_list(world: World, region: str, query: dict[str, str]) -> dict[str, Any]:
    migs = [m for (reg, _), m in sorted(world.migs.items()) if reg == region]
    body = r.page([mig_resource(world, m) for m in migs], query, "items")
    body.update(
        kind="compute#regionInstanceGroupManagerList",
        id=f"projects/{world.project}/regions/{region}/instanceGroupManagers",
        selfLink=f"{r.region_url(world.project, region)}/instanceGroupManagers",
    )
    return body


def mig_aggregated_list(world: World) -> dict[str, Any]:
    items: dict[str, Any] = {}
    for (region, _), mig in sorted(world.migs.items()):
        items.setdefault(f"regions/{region}", {"instanceGroupManagers": []})
        items[f"regions/{region}"]["instanceGroupManagers"].append(mig_resource(world, mig))
    return {
        "kind": "compute#instanceGroupManagerAggregatedList",
        "id": f"projects/{world.project}/aggregated/instanceGroupManagers",
        "items": items,
        "selfLink": f"{r.API_ROOT}/projects/{world.project}/aggregated/instanceGroupManagers",
    }


def operation_list(world: World, region: str, query: dict[str, str]) -> dict[str, Any]:
    ops = [operation_resource(world, op) for op in world.operations_in(region)]
    if (by_status := re.fullmatch(r'\s*status\s*(!=|=)\s*"?(\w+)"?\s*', query.get("filter") or "")) is not None:
        ops = [op for op in ops if (op["status"] == by_status[2]) == (by_status[1] == "=")]  # the one form Zen sends
    body = r.page(ops, query, "items")
    body.update(kind="compute#operationList", id=f"projects/{world.project}/regions/{region}/operations")
    return body


def instance_template(world: World, mig: Mig) -> dict[str, Any]:
    """The MIG's instance template as ``instanceTemplates.get`` answers: its machine type and scheduling
    (the provisioning model: SPOT VMs are deleted when preempted; FLEX_START ones at their run's end). Every model
    terminates on host maintenance, as GPU VMs must (terraform's ``on_host_maintenance``); STANDARD ones restart."""
    model = mig.provisioning_model
    scheduling: dict[str, Any] = {"provisioningModel": model, "automaticRestart": model == "STANDARD",
                                  "onHostMaintenance": "TERMINATE"}
    if model != "STANDARD":
        scheduling["instanceTerminationAction"] = "DELETE"
    if model == "SPOT":
        scheduling["preemptible"] = True
    return {"kind": "compute#instanceTemplate", "name": f"{mig.name}-template",
            "selfLink": r.template_url(world.project, mig.name),
            "properties": {"machineType": mig.spec.machine_type, "scheduling": scheduling}}
