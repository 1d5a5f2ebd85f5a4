"""The web console (console.tf, with console_domain set): Identity-Aware Proxy reaches the console's Cloud Run
service as its service agent, service-<number>@gcp-sa-iap.iam.gserviceaccount.com, which console.tf makes the
console's invoker. Enabling iap.googleapis.com does not make that agent, and IAM refuses a binding that names a
service account that does not exist yet: the first apply with console_domain failed there. The module makes it
first (scripts/iap_service_agent.sh, `gcloud beta services identity create`). Reads the real terraform/ files."""

from __future__ import annotations

import re

from tests.terraform.hcl import Module, TERRAFORM, strings


def _provisions_iap_agent(module: Module) -> list[str]:
    found = [f"google_project_service_identity.{name}"
             for name, body in module.resources_of("google_project_service_identity").items()
             if "iap.googleapis.com" in " ".join(strings(body))]
    for name, body in module.resources_of("terraform_data").items():
        text = " ".join(strings(body))
        scripts = re.findall(r"scripts/[\w.]+", text)
        text += "".join((TERRAFORM / s).read_text() for s in scripts if (TERRAFORM / s).exists())
        if "identity create" in text and "iap.googleapis.com" in text:
            found.append(f"terraform_data.{name}")
    return found


def test_the_iap_service_agent_exists_before_it_is_made_the_consoles_invoker():
    module = Module.load()
    invoker = module.resources_of("google_cloud_run_service_iam_member")["console_invoker"]
    assert invoker["member"] == "serviceAccount:${local.iap_service_agent}"
    assert module.locals["iap_service_agent"].endswith("@gcp-sa-iap.iam.gserviceaccount.com")
    provisioners = _provisions_iap_agent(module)
    assert provisioners, ("console.tf grants roles/run.invoker to the IAP service agent, but no resource creates "
                          "it (google_project_service_identity for iap.googleapis.com, or `gcloud beta services "
                          "identity create --service=iap.googleapis.com`)")
    waits_for = "".join(strings(invoker.get("depends_on", []))) + invoker["member"]
    assert any(p in waits_for for p in provisioners), f"console_invoker does not wait for {provisioners}"
