"""Local stand-ins for Google Cloud: Pub/Sub (gRPC), Compute (REST), and the Eventarc bridge."""
