"""gRPC servicers of the stand-in: google.pubsub.v1.Publisher and google.pubsub.v1.Subscriber.

Owns the wire: (de)serialising the proto-plus request/response types (Publish, the hot path,
uses the raw protobuf classes underneath them instead: no proto-plus marshalling), mapping
:class:`~.resources.PubSubError` to gRPC status codes, running StreamingPull (a reader thread
applies the client's acks/modacks while the handler streams batches out), and answering
UNIMPLEMENTED, with a clear message, for every other method of the ``google.pubsub.v1``
services (snapshots, seek, schemas, ...); google.iam.v1.IAMPolicy is ``.iam``'s. No code generation: handlers are registered with
``grpc.method_handlers_generic_handler``.
"""

from __future__ import annotations

import logging
import threading
from typing import Callable, Iterator

import grpc
from google.protobuf import empty_pb2
from google.pubsub_v1 import types as T

from . import resources as R
from .state import PubSubState

log = logging.getLogger(__name__)
PUBLISHER = "google.pubsub.v1.Publisher"
SUBSCRIBER = "google.pubsub.v1.Subscriber"
_EMPTY = empty_pb2.Empty()
_PUBLISH_REQUEST = T.PublishRequest.pb()  # raw protobuf classes
_PUBLISH_RESPONSE = T.PublishResponse.pb()


def _serialize_empty(message: empty_pb2.Empty) -> bytes:
    return message.SerializeToString()


def _abort(context: grpc.ServicerContext, error: R.PubSubError):
    context.abort(getattr(grpc.StatusCode, error.code), error.message)


def _unary(fn: Callable, request_type, response_type) -> grpc.RpcMethodHandler:
    def handler(request, context):
        try:
            return fn(request)
        except R.PubSubError as exc:
            _abort(context, exc)

    if hasattr(request_type, "FromString"):  # a raw protobuf class, not a proto-plus one
        deserializer, serializer = request_type.FromString, response_type.SerializeToString
    else:
        deserializer = request_type.deserialize
        serializer = _serialize_empty if response_type is None else response_type.serialize
    return grpc.unary_unary_rpc_method_handler(
        handler, request_deserializer=deserializer, response_serializer=serializer
    )


class PublishFaults:
    """Publishes a test makes fail: ``refuse(topic, message)`` (a raw ``PubsubMessage``) True for one message of a
    request fails the whole request with ``code``. PERMISSION_DENIED by default: a code the official client does not
    retry, so a request that also carries other messages (the client batches them) fails once; one it retried (say
    UNAVAILABLE) it retries for good, and every publish of that client waits behind it."""

    def __init__(self) -> None:
        self.refuse: Callable[[str, object], bool] | None = None
        self.code = "PERMISSION_DENIED"


class PublisherService:
    def __init__(self, state: PubSubState, faults: PublishFaults | None = None) -> None:
        self.state = state
        self.faults = faults or PublishFaults()

    def publish(self, request):
        """Raw ``PublishRequest`` protobuf in, raw ``PublishResponse`` out."""
        refuse = self.faults.refuse
        if refuse is not None and any(refuse(request.topic, message) for message in request.messages):
            raise R.PubSubError(self.faults.code, "Publish refused (a fault the test injected).")
        ids = self.state.publish(request.topic, request.messages)
        return _PUBLISH_RESPONSE(message_ids=ids)

    def list_topics(self, request: T.ListTopicsRequest) -> T.ListTopicsResponse:
        topics, token = self.state.list_topics(
            request.project, request.page_size, request.page_token
        )
        return T.ListTopicsResponse(topics=topics, next_page_token=token)

    def list_topic_subscriptions(self, request):
        names, token = self.state.list_topic_subscriptions(
            request.topic, request.page_size, request.page_token
        )
        return T.ListTopicSubscriptionsResponse(subscriptions=names, next_page_token=token)

    def delete_topic(self, request: T.DeleteTopicRequest):
        self.state.delete_topic(request.topic)
        return _EMPTY

    def detach_subscription(self, request: T.DetachSubscriptionRequest):
        self.state.detach_subscription(request.subscription)
        return T.DetachSubscriptionResponse()

    def handlers(self) -> grpc.GenericRpcHandler:
        s = self.state
        return grpc.method_handlers_generic_handler(PUBLISHER, {
            "CreateTopic": _unary(s.create_topic, T.Topic, T.Topic),
            "UpdateTopic": _unary(
                lambda r: s.update_topic(r.topic, list(r.update_mask.paths)),
                T.UpdateTopicRequest, T.Topic,
            ),
            "Publish": _unary(self.publish, _PUBLISH_REQUEST, _PUBLISH_RESPONSE),
            "GetTopic": _unary(lambda r: s.get_topic(r.topic), T.GetTopicRequest, T.Topic),
            "ListTopics": _unary(self.list_topics, T.ListTopicsRequest, T.ListTopicsResponse),
            "ListTopicSubscriptions": _unary(
                self.list_topic_subscriptions,
                T.ListTopicSubscriptionsRequest, T.ListTopicSubscriptionsResponse,
            ),
            "DeleteTopic": _unary(self.delete_topic, T.DeleteTopicRequest, None),
            "DetachSubscription": _unary(
                self.detach_subscription,
                T.DetachSubscriptionRequest, T.DetachSubscriptionResponse,
            ),
        })


class SubscriberService:
    def __init__(self, state: PubSubState) -> None:
        self.state = state

    def list_subscriptions(self, request: T.ListSubscriptionsRequest):
        subs, token = self.state.list_subscriptions(
            request.project, request.page_size, request.page_token
        )
        return T.ListSubscriptionsResponse(subscriptions=subs, next_page_token=token)

    def delete_subscription(self, request: T.DeleteSubscriptionRequest):
        self.state.delete_subscription(request.subscription)
        return _EMPTY

    def pull(self, request: T.PullRequest) -> T.PullResponse:
        received = self.state.delivery.pull(request.subscription, request.max_messages)
        return T.PullResponse(received_messages=received)

    def acknowledge(self, request: T.AcknowledgeRequest):
        self.state.delivery.acknowledge(request.subscription, list(request.ack_ids))
        return _EMPTY

    def modify_ack_deadline(self, request: T.ModifyAckDeadlineRequest):
        self.state.delivery.modify_ack_deadline(
            request.subscription, list(request.ack_ids), request.ack_deadline_seconds
        )
        return _EMPTY

    def modify_push_config(self, request: T.ModifyPushConfigRequest):
        self.state.get_subscription(request.subscription)  # NOT_FOUND first, as the service does
        if request.push_config.push_endpoint:
            raise R.unimplemented("Push delivery (ModifyPushConfig with a push endpoint)")
        return _EMPTY  # switching to pull delivery: the only mode there is

    def streaming_pull(self, requests: Iterator[T.StreamingPullRequest], context):
        try:
            first = next(requests)
        except StopIteration:
            return
        try:
            stream = self.state.delivery.open_stream(first)
        except R.PubSubError as exc:
            _abort(context, exc)
        context.add_callback(lambda: self.state.delivery.close_stream(stream))
        reader = threading.Thread(
            target=self._read_requests, args=(requests, stream),
            name="pubsub-standin-stream-reader", daemon=True,
        )
        reader.start()
        try:
            while True:
                try:
                    response = self.state.delivery.next_batch(stream)
                except R.PubSubError as exc:
                    _abort(context, exc)
                if response is None:
                    if not stream.closed:
                        break
                    return
                yield response
        finally:
            self.state.delivery.close_stream(stream)
        context.abort(grpc.StatusCode.UNAVAILABLE, "The Pub/Sub stand-in is shutting down.")

    def _read_requests(self, requests: Iterator[T.StreamingPullRequest], stream) -> None:
        try:
            for request in requests:
                self.state.delivery.stream_request(stream, request)
                if stream.error is not None or stream.closed:
                    break
        except Exception as exc:  # the client went away: cancellation surfaces here
            log.debug("StreamingPull request stream ended: %r", exc)
        finally:
            if stream.error is None:
                self.state.delivery.close_stream(stream)

    def handlers(self) -> grpc.GenericRpcHandler:
        s = self.state
        return grpc.method_handlers_generic_handler(SUBSCRIBER, {
            "CreateSubscription": _unary(s.create_subscription, T.Subscription, T.Subscription),
            "GetSubscription": _unary(
                lambda r: s.get_subscription(r.subscription),
                T.GetSubscriptionRequest, T.Subscription,
            ),
            "UpdateSubscription": _unary(
                lambda r: s.update_subscription(r.subscription, list(r.update_mask.paths)),
                T.UpdateSubscriptionRequest, T.Subscription,
            ),
            "ListSubscriptions": _unary(
                self.list_subscriptions, T.ListSubscriptionsRequest, T.ListSubscriptionsResponse
            ),
            "DeleteSubscription": _unary(
                self.delete_subscription, T.DeleteSubscriptionRequest, None
            ),
            "ModifyAckDeadline": _unary(self.modify_ack_deadline, T.ModifyAckDeadlineRequest, None),
            "Acknowledge": _unary(self.acknowledge, T.AcknowledgeRequest, None),
            "Pull": _unary(self.pull, T.PullRequest, T.PullResponse),
            "ModifyPushConfig": _unary(self.modify_push_config, T.ModifyPushConfigRequest, None),
            "StreamingPull": grpc.stream_stream_rpc_method_handler(
                self.streaming_pull,
                request_deserializer=T.StreamingPullRequest.deserialize,
                response_serializer=T.StreamingPullResponse.serialize,
            ),
        })


class UnimplementedService(grpc.GenericRpcHandler):
    """UNIMPLEMENTED for other google.pubsub.v1 methods (snapshots, seek, schemas); IAM is ``.iam``'s."""

    def service(self, handler_call_details):
        method = handler_call_details.method or ""
        if not method.startswith(("/google.pubsub.v1.", "/google.iam.v1.IAMPolicy/")):
            return None
        name = method.rsplit("/", 1)[-1]

        def handler(request: bytes, context):
            context.abort(
                grpc.StatusCode.UNIMPLEMENTED,
                f"{name} is not implemented by the local Pub/Sub stand-in.",
            )

        return grpc.unary_unary_rpc_method_handler(handler)

