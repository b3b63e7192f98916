"""EventBridge: events_rules_full, events_targets_full and events_list_skips."""

from __future__ import annotations

import json

from .wire import Req, json_error

QUOTA_MESSAGE = "The requested resource exceeds the maximum number allowed."


class Events:
    """The EventBridge behaviours of lagproxy.Lag."""

    def handle_events(self, req: Req):
        """events_rules_full, events_targets_full and events_list_skips; None: not ours."""
        op, j = req.operation, req.json or {}
        if op == "ListRules":
            return self.list_rules_skipping(req)
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

    def list_rules_skipping(self, req: Req):
        """ListRules with the rules events_list_skips names left out of the page, as a listing
        read page by page while rules ahead of them come and go leaves them out."""
        status, headers, body = self.forward(req)
        if not 200 <= status < 300:
            return status, headers, body, None
        answer = json.loads(body or b"{}")
        rules = answer.get("Rules", [])
        kept = [r for r in rules if not self.rule("events_list_skips", r.get("Name"))]
        if len(kept) == len(rules):
            return status, headers, body, None
        answer["Rules"] = kept
        return status, headers, json.dumps(answer).encode(), "events_list_skips"
