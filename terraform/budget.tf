# A billing budget on this project's spend, with e-mail alerts to the billing account's admins at 50%, 90%
# and 100% of it (and at 100% of the forecast). Created when billing_account is given; its amount is
# monthly_budget_usd (`zen clusters` prints the worst case the configuration allows: every cluster at its
# max_vms, at the dearest price it may pay). A budget alerts, it does not stop spending: lower max_vms for
# a hard bound. Whoever applies needs Billing Account Costs Manager on the billing account, and
# serviceusage.services.use on the project (versions.tf: the budget's provider bills its calls to it).
resource "google_billing_budget" "zen" {
  provider        = google.budget # billed to this project: user credentials are refused without one
  count           = var.billing_account == null ? 0 : 1
  billing_account = var.billing_account
  display_name    = "${var.name_prefix} (${var.project_id})"

  budget_filter {
    projects = ["projects/${data.google_project.this.number}"]
  }

  amount {
    specified_amount {
      currency_code = "USD"
      units         = tostring(var.monthly_budget_usd)
    }
  }

  threshold_rules {
    threshold_percent = 0.5
  }
  threshold_rules {
    threshold_percent = 0.9
  }
  threshold_rules {
    threshold_percent = 1.0
  }
  threshold_rules {
    threshold_percent = 1.0
    spend_basis       = "FORECASTED_SPEND"
  }

  depends_on = [google_project_service.apis]
}
