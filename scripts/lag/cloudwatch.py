"""CloudWatch: cloudwatch_metrics, GetMetricData (Smithy RPC v2 CBOR) answered by the proxy from
scripted series."""

from __future__ import annotations

from .cbor import CborTag, cbor_answer, epoch_of
from .wire import Req


class CloudWatch:
    """The CloudWatch answers of lagproxy.Lag."""

    def handle_cloudwatch(self, req: Req):
        """cloudwatch_metrics: GetMetricData (Smithy RPC v2 CBOR) answered from scripted datapoints."""
        with self.lock:
            rule = self.rules.get("cloudwatch_metrics")
        if rule is None:
            return None
        if rule == "AccessDenied":
            return (*cbor_answer({"__type": "com.amazonaws.cloudwatch#AccessDenied",
                                  "message": "User is not authorized to perform: cloudwatch:GetMetricData"},
                                 403, "AccessDenied;Sender"), "cloudwatch_metrics")
        j = req.cbor if isinstance(req.cbor, dict) else {}
        start, end = epoch_of(j.get("StartTime")), epoch_of(j.get("EndTime"))
        newest_first = j.get("ScanBy", "TimestampDescending") != "TimestampAscending"
        results = []
        for q in j.get("MetricDataQueries") or []:
            if q.get("ReturnData") is False:
                continue
            stat = q.get("MetricStat") or {}
            metric = stat.get("Metric") or {}
            dims = {d.get("Name"): d.get("Value") for d in metric.get("Dimensions") or []}
            points = []
            for s in rule:
                if (s.get("namespace") == metric.get("Namespace") and s.get("metric") == metric.get("MetricName")
                        and (s.get("dimensions") or {}) == dims and s.get("stat") in (None, stat.get("Stat"))):
                    points += [(p["t"], float(p["value"])) for p in s["points"]]
            points = [p for p in points if (start is None or p[0] >= start) and (end is None or p[0] < end)]
            points.sort(key=lambda p: p[0], reverse=newest_first)
            results.append({"Id": q.get("Id"), "Label": q.get("Label") or metric.get("MetricName") or q.get("Id"),
                            "Timestamps": [CborTag(1, float(int(t))) for t, _ in points],
                            "Values": [v for _, v in points], "StatusCode": "Complete"})
        return (*cbor_answer({"MetricDataResults": results, "Messages": []}), "cloudwatch_metrics")
