"""KMS: kms_key_lag_s and kms_keys_full."""

from __future__ import annotations

import json
import time

from .wire import Req, json_error


def kms_key_id(ref: str | None) -> str:
    """The key id in a KMS KeyId / TargetKeyId (a key id or a key ARN)."""
    ref = ref or ""
    return ref.split(":key/", 1)[1] if ":key/" in ref else ref


def kms_alias(ref: str | None) -> str | None:
    """The alias name (alias/...) in a KMS KeyId that names an alias or an alias ARN, else None."""
    ref = ref or ""
    if ref.startswith("alias/"):
        return ref
    if ref.startswith("arn:") and ":alias/" in ref:
        return "alias/" + ref.split(":alias/", 1)[1]
    return None


class Kms:
    """The KMS behaviours of lagproxy.Lag."""

    def kms_names_of(self, like: Req, key_id: str) -> set:
        """The tag values of a KMS key: as it was made through this proxy, else read upstream."""
        with self.lock:
            known = self.kms_names.get(key_id)
        if known is not None:
            return known
        status, doc = self.json_call(like, "TrentService.ListResourceTags", {"KeyId": key_id})
        names = {t.get("TagValue") for t in doc.get("Tags") or [] if isinstance(t, dict)} if status == 200 else set()
        with self.lock:
            self.kms_names[key_id] = names
        return names

    def kms_window(self, key_id: str) -> dict | None:
        with self.lock:
            w = self.kms_windows.get(key_id)
            if w is not None and w["until"] <= time.monotonic():
                del self.kms_windows[key_id]
                w = None
            return w

    def handle_kms(self, req: Req):
        """kms_key_lag_s and kms_keys_full."""
        op, j, now = req.operation, req.json or {}, time.monotonic()
        if op == "CreateKey":
            names = {t.get("TagValue") for t in j.get("Tags") or [] if isinstance(t, dict)}
            if self.rule_any("kms_keys_full", names):
                return (*json_error("LimitExceededException", "The request was rejected because a quota was exceeded."),
                        "kms_keys_full")
            status, headers, body = self.forward(req)
            kid = None
            if 200 <= status < 300:
                try:
                    kid = (json.loads(body).get("KeyMetadata") or {}).get("KeyId")
                except ValueError:
                    kid = None
            if kid:
                n = self.rule_any("kms_key_lag_s", names)
                with self.lock:
                    self.kms_names[kid] = names
                    if n:
                        self.kms_windows[kid] = {"until": now + n, "after": "CreateKey", "n": n}
                return status, headers, body, "kms_key_lag_s" if n else None
            return status, headers, body, None
        if op == "CancelKeyDeletion":
            status, headers, body = self.forward(req)
            if 200 <= status < 300:
                try:
                    kid = kms_key_id(json.loads(body).get("KeyId") or j.get("KeyId"))
                except ValueError:
                    kid = kms_key_id(j.get("KeyId"))
                n = self.rule_any("kms_key_lag_s", self.kms_names_of(req, kid))
                if n:
                    with self.lock:
                        self.kms_windows[kid] = {"until": now + n, "after": "CancelKeyDeletion", "n": n}
                    return status, headers, body, "kms_key_lag_s"
            return status, headers, body, None
        if op in ("CreateAlias", "EnableKey"):
            ref = j.get("TargetKeyId") if op == "CreateAlias" else j.get("KeyId")
            kid = kms_key_id(ref)
            w = self.kms_window(kid)
            if w is not None:
                if w["after"] == "CreateKey":
                    return (*json_error("NotFoundException", f"Key '{ref}' does not exist"), "kms_key_lag_s")
                return (*json_error("KMSInvalidStateException", f"{ref} is pending deletion."), "kms_key_lag_s")
            status, headers, body = self.forward(req)
            if op == "CreateAlias" and 200 <= status < 300 and j.get("AliasName"):
                n = self.rule_any("kms_key_lag_s", self.kms_names_of(req, kid))
                if n:
                    with self.lock:
                        self.kms_alias_windows[j["AliasName"]] = now + n
                    return status, headers, body, "kms_key_lag_s"
            return status, headers, body, None
        if op == "DescribeKey":
            ref = j.get("KeyId")
            alias = kms_alias(ref)
            if alias is not None:
                with self.lock:
                    until = self.kms_alias_windows.get(alias)
                if until is not None and now < until:
                    return (*json_error("NotFoundException", f"Alias {ref} is not found."), "kms_key_lag_s")
            status, headers, body = self.forward(req)
            if 200 <= status < 300:
                try:
                    kid = (json.loads(body).get("KeyMetadata") or {}).get("KeyId")
                except ValueError:
                    kid = None
                w = self.kms_window(kid) if kid else None
                if w is not None and w["after"] == "CreateKey":
                    return (*json_error("NotFoundException", f"Key '{ref}' does not exist"), "kms_key_lag_s")
            return status, headers, body, None
        return (*self.forward(req), None)
