"""EventBridge: events_rules_full and events_targets_full."""

from __future__ import annotations

from .wire import Req, json_error

QUOTA_MESSAGE = "The requested resource exceeds the maximum number allowed."


class Events:
    """The EventBridge behaviours of lagproxy.Lag."""

    def handle_events(self, req: Req):
        """events_rules_full and events_targets_full; None: not ours."""
        op, j = req.operation, req.json or {}
        if op == "PutRule" and self.rule("events_rules_full", j.get("Name")):
            # A full bus refuses new rules only: an existing rule can still be updated.
            probe = {"Name": j.get("Name")}
            if j.get("EventBusName"):
                probe["EventBusName"] = j["EventBusName"]
            status, _ = self.json_call(req, "AWSEvents.DescribeRule", probe)
            if status != 200:
                return (*json_error("LimitExceededException", QUOTA_MESSAGE), "events_rules_full")
        if op == "PutTargets" and self.rule("events_targets_full", j.get("Rule")):
            return (*json_error("LimitExceededException", QUOTA_MESSAGE), "events_targets_full")
        return None
