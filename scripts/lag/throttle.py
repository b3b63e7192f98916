"""throttle_rps: AWS's request-rate throttling, a token bucket per service."""

from __future__ import annotations

import json
import time
import uuid

from .wire import eks_error, query_error, sqs_error


def throttled(service: str) -> tuple[int, list, bytes]:
    """The answer AWS gives a throttled request of `service`."""
    if service in ("iam", "sts"):
        return query_error(400, "Throttling", "Rate exceeded")
    if service == "ec2":
        body = (f"<Response><Errors><Error><Code>RequestLimitExceeded</Code><Message>Request limit exceeded."
                f"</Message></Error></Errors><RequestID>{uuid.uuid4()}</RequestID></Response>").encode()
        return 503, [("Content-Type", "text/xml")], body
    if service == "eks":
        return eks_error(429, "TooManyRequestsException", "Rate exceeded")
    if service == "sqs":
        # Real SQS does not prefix its throttling code with AWS.SimpleQueueService. (microburst does).
        status, headers, body = sqs_error("RequestThrottled", "RequestThrottled", "Request is throttled.")
        return status, [(k, "RequestThrottled;Sender" if k == "x-amzn-query-error" else v) for k, v in headers], body
    body = json.dumps({"__type": "ThrottlingException", "message": "Rate exceeded"}).encode()
    return 400, [("Content-Type", "application/x-amz-json-1.1"), ("x-amzn-RequestId", str(uuid.uuid4()))], body


class Throttle:
    """throttle_rps of lagproxy.Lag."""

    def take_token(self, service: str) -> bool:
        """throttle_rps: False when the service's bucket is empty (the request is throttled)."""
        rate = self.rule("throttle_rps", service)
        if not rate:
            return True
        now = time.monotonic()
        with self.lock:
            b = self.buckets.setdefault(service, {"tokens": float(rate), "at": now})
            b["tokens"] = min(float(rate), b["tokens"] + (now - b["at"]) * rate)
            b["at"] = now
            if b["tokens"] < 1.0:
                return False
            b["tokens"] -= 1.0
            return True
