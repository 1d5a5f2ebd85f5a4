"""google.iam.v1.IAMPolicy for the stand-in's topics and subscriptions: GetIamPolicy, SetIamPolicy
and TestIamPermissions, on the Publisher's channel as Pub/Sub serves them.

The stand-in keeps each resource's policy so that what Zen grants can be read back
(``zen.adapters.control_subscriptions`` grants a cluster's agents on each VM's control subscription); it never
enforces one: every caller may do everything, as with the Pub/Sub emulator. A policy goes with its
resource: a subscription deleted and made again under the same name has none, as in Pub/Sub.
"""

from __future__ import annotations

import threading

import grpc
from google.iam.v1 import iam_policy_pb2, policy_pb2

from . import resources as R
from .service import _unary
from .state import PubSubState

IAM = "google.iam.v1.IAMPolicy"


class IamPolicyService:
    def __init__(self, state: PubSubState) -> None:
        self.state = state
        self._policies: dict[str, tuple[object, policy_pb2.Policy]] = {}
        self._lock = threading.Lock()

    def _resource(self, name: str) -> object:
        """The resource's current incarnation (its configuration object); NOT_FOUND when there is none."""
        if "/subscriptions/" in name:
            return self.state.subscription(name)
        if "/topics/" in name:
            return self.state._topic(name)
        raise R.invalid(f"Invalid resource name given (name={name}).")

    def _policy(self, name: str) -> policy_pb2.Policy:
        with self.state._lock:
            resource = self._resource(name)
        with self._lock:
            kept = self._policies.get(name)
            return kept[1] if kept is not None and kept[0] is resource else policy_pb2.Policy(etag=b"0")

    def get(self, request: iam_policy_pb2.GetIamPolicyRequest) -> policy_pb2.Policy:
        return self._policy(request.resource)

    def set(self, request: iam_policy_pb2.SetIamPolicyRequest) -> policy_pb2.Policy:
        with self.state._lock:
            resource = self._resource(request.resource)
        with self._lock:
            kept = self._policies.get(request.resource)
            current = kept[1] if kept is not None and kept[0] is resource else policy_pb2.Policy(etag=b"0")
            if request.policy.etag and request.policy.etag != current.etag:
                raise R.PubSubError("ABORTED", "The policy was changed since it was read (etag mismatch).")
            policy = policy_pb2.Policy()
            policy.CopyFrom(request.policy)
            policy.version = request.policy.version or 1
            policy.etag = str(int(current.etag) + 1).encode()
            self._policies[request.resource] = (resource, policy)
            return policy

    def test(self, request: iam_policy_pb2.TestIamPermissionsRequest) -> iam_policy_pb2.TestIamPermissionsResponse:
        self._policy(request.resource)  # NOT_FOUND for a resource that does not exist
        return iam_policy_pb2.TestIamPermissionsResponse(permissions=list(request.permissions))

    def handlers(self) -> grpc.GenericRpcHandler:
        return grpc.method_handlers_generic_handler(IAM, {
            "GetIamPolicy": _unary(self.get, iam_policy_pb2.GetIamPolicyRequest, policy_pb2.Policy),
            "SetIamPolicy": _unary(self.set, iam_policy_pb2.SetIamPolicyRequest, policy_pb2.Policy),
            "TestIamPermissions": _unary(self.test, iam_policy_pb2.TestIamPermissionsRequest,
                                         iam_policy_pb2.TestIamPermissionsResponse),
        })
