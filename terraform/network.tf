# Networking: Cloud SQL's private IP (private services access), the connector the functions reach
# it through, and Cloud NAT so that GPU VMs without external IPs can install the agent and pull
# job images.

# The VPC network: an existing one (var.network, `default` unless told), or with create_network a
# new auto-mode network of that name (a subnetwork in every region, like `default`, but without its
# permissive firewall rules: nothing reaches Zen's VMs from outside, they only call out).
data "google_compute_network" "zen" {
  count = var.create_network ? 0 : 1
  name  = var.network

  depends_on = [google_project_service.apis]
}

resource "google_compute_network" "zen" {
  count                   = var.create_network ? 1 : 0
  name                    = var.network
  auto_create_subnetworks = true

  depends_on = [google_project_service.apis]
}

# Spelled out for the created network: no ingress from anywhere (the VMs only call out, through NAT).
resource "google_compute_firewall" "deny_ingress" {
  count         = var.create_network ? 1 : 0
  name          = "${var.name_prefix}-deny-ingress"
  network       = google_compute_network.zen[0].id
  direction     = "INGRESS"
  priority      = 65534
  source_ranges = ["0.0.0.0/0"]

  deny {
    protocol = "all"
  }
}

locals {
  network_id   = var.create_network ? google_compute_network.zen[0].id : data.google_compute_network.zen[0].id
  network_name = var.create_network ? google_compute_network.zen[0].name : data.google_compute_network.zen[0].name
}

resource "google_compute_global_address" "private_services" {
  count         = var.create_private_service_access ? 1 : 0
  name          = "${var.name_prefix}-private-services"
  purpose       = "VPC_PEERING"
  address_type  = "INTERNAL"
  prefix_length = 20
  network       = local.network_id
}

# Abandoned on destroy: Service Networking refuses to delete the connection while Cloud SQL still holds its
# producer resources, which it keeps for a while after the instance is deleted ("Producer services (e.g.
# CloudSQL, ...) are still using this connection"), and `terraform destroy` stopped there. Its VPC peering stays
# in the network (docs/how-to/deploy.md, Tearing Zen down).
resource "google_service_networking_connection" "private_services" {
  count                   = var.create_private_service_access ? 1 : 0
  network                 = local.network_id
  service                 = "servicenetworking.googleapis.com"
  reserved_peering_ranges = [google_compute_global_address.private_services[0].name]
  deletion_policy         = "ABANDON"
}

# Gen2 functions reach private IPs through a Serverless VPC Access connector; only traffic to
# private ranges goes through it (Pub/Sub and Compute are reached directly).
resource "google_vpc_access_connector" "zen" {
  name          = "${var.name_prefix}-connector"
  region        = var.region
  network       = local.network_name
  ip_cidr_range = var.vpc_connector_cidr
  machine_type  = "e2-micro"
  min_instances = 2
  max_instances = 3
}

resource "google_compute_router" "nat" {
  for_each = var.create_nat ? local.gpu_regions : toset([])
  name     = "${var.name_prefix}-nat-${each.value}"
  region   = each.value
  network  = local.network_id
}

resource "google_compute_router_nat" "nat" {
  for_each                           = google_compute_router.nat
  name                               = "${var.name_prefix}-nat-${each.key}"
  router                             = each.value.name
  region                             = each.key
  nat_ip_allocate_option             = "AUTO_ONLY"
  source_subnetwork_ip_ranges_to_nat = "ALL_SUBNETWORKS_ALL_IP_RANGES"

  log_config {
    enable = true
    filter = "ERRORS_ONLY"
  }
}
