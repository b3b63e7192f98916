"""Service Quotas: servicequotas_quotas, GetServiceQuota of a scripted quota code."""

from __future__ import annotations

import json
import uuid

from .wire import Req, json_error


class ServiceQuotas:
    """The Service Quotas answers of lagproxy.Lag."""

    def handle_servicequotas(self, req: Req):
        """servicequotas_quotas: GetServiceQuota of a scripted quota code."""
        j = req.json or {}
        code = j.get("QuotaCode")
        rule = self.rule("servicequotas_quotas", code)
        if rule is None:
            return None
        if rule == "AccessDenied":
            return (*json_error("AccessDeniedException", "User: arn:aws:sts::000000000000:assumed-role/karpctl/session "
                                "is not authorized to perform: servicequotas:GetServiceQuota"), "servicequotas_quotas")
        service = j.get("ServiceCode", "ec2")
        quota = {"ServiceCode": service, "ServiceName": "Amazon Elastic Compute Cloud (Amazon EC2)",
                 "QuotaArn": f"arn:aws:servicequotas:{req.region()}:000000000000:{service}/{code}", "QuotaCode": code,
                 "QuotaName": code, "Value": float(rule), "Unit": "None", "Adjustable": True, "GlobalQuota": False}
        return (200, [("Content-Type", "application/x-amz-json-1.1"), ("x-amzn-RequestId", str(uuid.uuid4()))],
                json.dumps({"Quota": quota}).encode(), "servicequotas_quotas")
