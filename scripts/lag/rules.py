"""The rules a test sets (POST /_lag/rules; scripts/lagproxy.py documents each): their names,
how a patch merges into them, and how a behaviour looks one up."""

from __future__ import annotations

import json
import re
import time

import lagpolicy

from .cloudtrail import expand_entries
from .wire import BadRules

NUMERIC_RULES = ("throttle_rps", "sqs_attr_lag_s", "sqs_create_lag_s", "sqs_delete_lag_s", "eks_role_propagation_s",
                 "iam_policy_version_lag_s", "sqs_attr_flipflop_s", "sqs_create_flipflop_s",
                 "sqs_delete_flipflop_s", "sqs_deleted_recently_s", "sqs_tags_lag_s",
                 "eks_delete_flipflop_s", "eks_delete_lag_s", "kms_key_lag_s")


BOOL_RULES = ("sqs_tag_on_create_unsupported", "iam_watch_role", "eks_tag_associations", "events_rules_full",
              "events_targets_full", "kms_keys_full", "eks_access_entry_tags", "ec2_subnet_dns64",
              "events_list_skips")


MAP_RULES = NUMERIC_RULES + BOOL_RULES + ("eks_cluster_status", "eks_compute_config", "upstreams",
                                         "eks_association_fields", "ec2_shared_vpc", "iam_simulate",
                                         "servicequotas_quotas", "eks_ip_family")


OTHER_RULES = ("eks_cluster_gone", "sts_partition", "iam_account_summary", "cloudtrail_events",
               "cloudtrail_lookup_rps", "cloudwatch_metrics", "caller_policy")


class Rules:
    """The rules of lagproxy.Lag (self.rules, under self.lock)."""

    def merge(self, patch) -> dict:
        if not isinstance(patch, dict):
            raise BadRules("the rules must be a JSON object")
        with self.lock:
            new = json.loads(json.dumps(self.rules))
            for key, val in patch.items():
                if val is None:
                    new.pop(key, None)
                    continue
                if key in MAP_RULES:
                    if not isinstance(val, dict):
                        raise BadRules(f"{key} must be an object keyed by name (e.g. {{\"my-name\": 2}}); "
                                       "rules are scoped so that parallel tests do not interfere")
                    cur = new.setdefault(key, {})
                    for name, v in val.items():
                        if v is None:
                            cur.pop(name, None)
                        elif key in NUMERIC_RULES and (isinstance(v, bool) or not isinstance(v, (int, float)) or v < 0):
                            raise BadRules(f"{key}.{name} must be a number of seconds >= 0 (got {v!r})")
                        elif key in BOOL_RULES and not isinstance(v, bool):
                            raise BadRules(f"{key}.{name} must be true or false (got {v!r})")
                        elif key == "eks_ip_family" and v not in ("ipv4", "ipv6"):
                            raise BadRules(f"eks_ip_family.{name} must be \"ipv4\" or \"ipv6\" (got {v!r})")
                        elif key == "eks_cluster_status" and not isinstance(v, str):
                            raise BadRules(f"eks_cluster_status.{name} must be a status string (got {v!r})")
                        elif key == "upstreams" and not (isinstance(v, str) and v.startswith(("http://", "https://"))):
                            raise BadRules(f"upstreams.{name} must be an http(s) URL (got {v!r})")
                        elif key == "eks_association_fields" and not isinstance(v, dict):
                            raise BadRules(f"eks_association_fields.{name} must be an object of fields (got {v!r})")
                        elif key == "iam_simulate" and not (v == "AccessDenied" or isinstance(v, dict)):
                            raise BadRules(f"iam_simulate.{name} must be {{decisions, context_keys}} or "
                                           f"\"AccessDenied\" (got {v!r})")
                        elif key == "servicequotas_quotas" and not (v == "AccessDenied" or (
                                isinstance(v, (int, float)) and not isinstance(v, bool) and v >= 0)):
                            raise BadRules(f"servicequotas_quotas.{name} must be a number >= 0 or \"AccessDenied\" "
                                           f"(got {v!r})")
                        elif key == "ec2_shared_vpc" and not (isinstance(v, str) and re.fullmatch(r"[0-9]{12}", v)):
                            raise BadRules(f"ec2_shared_vpc.{name} must be the owner's 12-digit account id (got {v!r})")
                        else:
                            cur[name] = v
                    if not cur:
                        new.pop(key)
                elif key == "iam_account_summary":
                    ok = val == "AccessDenied" or (isinstance(val, dict) and all(
                        isinstance(k, str) and isinstance(v, int) and not isinstance(v, bool) and v >= 0
                        for k, v in val.items()))
                    if not ok:
                        raise BadRules("iam_account_summary must be {SummaryMap key: integer >= 0} "
                                       "(e.g. {\"AttachedPoliciesPerRoleQuota\": 20}) or \"AccessDenied\"")
                    new[key] = val
                elif key == "cloudtrail_events":
                    if val == "AccessDenied":
                        new[key] = val
                    elif isinstance(val, list) and all(isinstance(e, dict) for e in val):
                        new[key] = expand_entries(val, time.time())
                    else:
                        raise BadRules("cloudtrail_events must be a list of records (compact entries or AWS's "
                                       "shape) or \"AccessDenied\"")
                elif key == "cloudtrail_lookup_rps":
                    if isinstance(val, bool) or not isinstance(val, (int, float)) or val <= 0:
                        raise BadRules(f"cloudtrail_lookup_rps must be a number of lookups a second > 0 (got {val!r})")
                    new[key] = val
                elif key == "cloudwatch_metrics":
                    if val == "AccessDenied":
                        new[key] = val
                        continue
                    if not isinstance(val, list):
                        raise BadRules("cloudwatch_metrics must be a list of series or \"AccessDenied\"")
                    now, series = time.time(), []
                    for s in val:
                        ok = (isinstance(s, dict) and isinstance(s.get("namespace"), str)
                              and isinstance(s.get("metric"), str) and isinstance(s.get("dimensions", {}), dict)
                              and isinstance(s.get("points"), list))
                        if not ok:
                            raise BadRules("cloudwatch_metrics: each series needs namespace, metric, dimensions "
                                           f"{{name: value}} and points [[minutes_ago, value], ...] (got {s!r})")
                        pts = []
                        for p in s["points"]:
                            if isinstance(p, dict) and "t" in p:
                                pts.append({"t": float(p["t"]), "value": float(p["value"])})
                            elif isinstance(p, list) and len(p) == 2:
                                pts.append({"t": now - float(p[0]) * 60.0, "value": float(p[1])})
                            else:
                                raise BadRules(f"cloudwatch_metrics: a point is [minutes_ago, value] (got {p!r})")
                        series.append({**s, "points": pts})
                    new[key] = series
                elif key == "caller_policy":
                    try:
                        lagpolicy.statements_of(val)
                    except lagpolicy.BadPolicy as e:
                        raise BadRules(str(e)) from None
                    new[key] = val
                    self.gate.clear_log()
                elif key == "sts_partition":
                    if not (isinstance(val, str) and val.startswith("aws")):
                        raise BadRules("sts_partition must be a partition name such as \"aws-cn\"")
                    new[key] = val
                elif key == "eks_cluster_gone":
                    cur = set(new.get(key, []))
                    if isinstance(val, list) and all(isinstance(x, str) for x in val):
                        cur |= set(val)
                    elif isinstance(val, dict):
                        for name, on in val.items():
                            (cur.add if on else cur.discard)(name)
                    else:
                        raise BadRules("eks_cluster_gone must be a list of cluster names or {name: bool}")
                    if cur:
                        new[key] = sorted(cur)
                    else:
                        new.pop(key, None)
                else:
                    raise BadRules(f"unknown rule {key!r}; known: "
                                   f"{', '.join(MAP_RULES + OTHER_RULES)}")
            self.rules = new
            return json.loads(json.dumps(new))

    def rule(self, key: str, name: str | None):
        """The rule value for `name` (exact name first, then "*"), or None."""
        if name is None:
            return None
        with self.lock:
            m = self.rules.get(key) or {}
            if name in m:
                return m[name]
            return m.get("*")

    def rule_any(self, key: str, names) -> object:
        """The rule value for the first of `names` that has one, else for "*", else None."""
        with self.lock:
            m = self.rules.get(key) or {}
            for n in names:
                if n in m:
                    return m[n]
            return m.get("*")

    def cluster_gone(self, name: str | None) -> bool:
        with self.lock:
            gone = self.rules.get("eks_cluster_gone") or []
            return name is not None and (name in gone or "*" in gone)

    def upstream_for(self, service: str) -> str:
        with self.lock:
            return (self.rules.get("upstreams") or {}).get(service, self.upstream).rstrip("/")
