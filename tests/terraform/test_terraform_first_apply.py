"""A first `terraform apply` into a fresh project: every resource whose API the module itself enables
(google_project_service.apis) must wait for that enabling, or it races it and fails with
"Identity and Access Management (IAM) API has not been used in project ... or it is disabled" (403
SERVICE_DISABLED). The module does this for its topics, buckets, SQL, functions, scheduler, secret...
(depends_on = [google_project_service.apis]) but not for the service accounts and the custom roles,
which need iam.googleapis.com: an API a new project does not have on (Service Usage docs, "Services
enabled by default": logging, monitoring, storage, serviceusage, ... not iam, compute, pubsub).

Reads the real terraform/ files with the repository's HCL reader (tests/terraform/hcl.py) and follows
every reference (resources, data sources, locals, depends_on) to see whether a resource waits for
google_project_service.apis."""

from __future__ import annotations

import re

from tests.terraform.hcl import Module, strings
from tests.terraform.test_terraform_deploy_risks import API_OF_RESOURCE, enabled_apis

# APIs a project created with the console or gcloud has on already (cloud.google.com/service-usage/docs/
# enabled-service#default), plus cloudresourcemanager, which the plan itself needs (data.google_project).
ON_BY_DEFAULT = {"logging", "monitoring", "storage", "serviceusage", "cloudresourcemanager"}
# Bindings on resources the user made before the apply (their secrets, their image repositories): the API
# was on before terraform ran.
ON_USERS_OWN_RESOURCES = {("google_secret_manager_secret_iam_member", "agent_reads_secrets"),
                          ("google_secret_manager_regional_secret_iam_member", "agent_reads_regional_secrets"),
                          ("google_artifact_registry_repository_iam_member", "agent_pulls_images")}

REF = re.compile(r"\b(data\.)?(google_[a-z0-9_]+|terraform_data)\.([a-z0-9_]+)|\blocal\.([a-z0-9_]+)")
APIS = ("res", "google_project_service", "apis")


def _graph(module: Module) -> dict:
    def refs(value) -> set:
        out = set()
        for text in strings(value):
            for m in REF.finditer(text):
                out.add(("local", m.group(4)) if m.group(4) else ("data" if m.group(1) else "res", m.group(2), m.group(3)))
        return out

    graph = {("res", t, n): refs(b) for (t, n), b in module.resources.items()}
    graph |= {("data", t, n): refs(b) for (t, n), b in module.data.items()}
    graph |= {("local", n): refs(b) for n, b in module.locals.items()}
    return graph


def _waits_for_apis(graph: dict, node, seen: frozenset = frozenset()) -> bool:
    if node == APIS:
        return True
    if node in seen:
        return False
    return any(_waits_for_apis(graph, d, seen | {node}) for d in graph.get(node, ()))


def test_every_resource_of_an_api_the_module_enables_waits_for_it():
    module = Module.load()
    graph = _graph(module)
    enabled_here = enabled_apis(module) - ON_BY_DEFAULT
    racing = sorted(
        f"{rtype}.{name} (needs {API_OF_RESOURCE[rtype]}.googleapis.com)"
        for (rtype, name) in module.resources
        if rtype in API_OF_RESOURCE and API_OF_RESOURCE[rtype] in enabled_here
        and (rtype, name) not in ON_USERS_OWN_RESOURCES
        and not _waits_for_apis(graph, ("res", rtype, name))
    )
    assert not racing, ("created in parallel with the enabling of their API on a first apply "
                        "(no depends_on google_project_service.apis, directly or through a reference): "
                        + "; ".join(racing))
