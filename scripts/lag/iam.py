"""IAM: iam_policy_version_lag_s, iam_watch_role, iam_account_summary, the role windows of
eks_role_propagation_s, and iam_simulate (the policy simulator, answered by the proxy)."""

from __future__ import annotations

import fnmatch
import html
import json
import re
import time
import urllib.parse
import uuid

from .wire import Req, page_offset, page_token, query_error

DEFAULT_VERSION_RE = re.compile(rb"<DefaultVersionId>([^<]*)</DefaultVersionId>")


# IAM's default page for SimulatePrincipalPolicy (MaxItems).
IAM_PAGE = 100


def simulate_params(form: dict) -> dict:
    """What a SimulatePrincipalPolicy request asks (the query wire's member lists)."""
    def members(prefix: str) -> list:
        out = []
        while f"{prefix}.member.{len(out) + 1}" in form:
            out.append(form[f"{prefix}.member.{len(out) + 1}"])
        return out

    entries, n = [], 1
    while f"ContextEntries.member.{n}.ContextKeyName" in form:
        values = members(f"ContextEntries.member.{n}.ContextKeyValues")
        entries.append({"key": form[f"ContextEntries.member.{n}.ContextKeyName"], "values": values,
                        "type": form.get(f"ContextEntries.member.{n}.ContextKeyType")})
        n += 1
    return {"actions": members("ActionNames"), "resources": members("ResourceArns"), "context_entries": entries}


def simulate_decision(rule: dict, action: str, resource: str = "*", context: list | None = None) -> dict:
    """iam_simulate: the decision of `action` on `resource` with `context` (the request's
    ContextEntries) (exact name, then a pattern such as "ec2:*", then "*", else allowed), as
    {decision, organizations, boundary, matched}. A decision's "unless" {key: [patterns]} lifts it
    when a context value of that key matches; its "resources" [patterns] limit it to those ARNs."""
    decisions = rule.get("decisions") or {}
    d = decisions.get(action)
    if d is None:
        for pat, v in decisions.items():
            if pat != "*" and fnmatch.fnmatchcase(action, pat):
                d = v
                break
    if d is None:
        d = decisions.get("*", "allowed")
    if isinstance(d, dict) and d.get("decision") in ("scp", "boundary"):
        d = {**{"scp": {"decision": "explicitDeny", "organizations": False},
                "boundary": {"decision": "implicitDeny", "boundary": False}}[d["decision"]],
             **{k: v for k, v in d.items() if k != "decision"}}
    if isinstance(d, str):
        d = {"scp": {"decision": "explicitDeny", "organizations": False},
             "boundary": {"decision": "implicitDeny", "boundary": False}}.get(d, {"decision": d})
    given = {}
    for entry in context or []:
        given.setdefault(entry["key"].lower(), []).extend(entry["values"])
    exempt = any(fnmatch.fnmatchcase(v, pat) for key, pats in (d.get("unless") or {}).items()
                 for v in given.get(key.lower(), []) for pat in pats)
    scoped = d.get("resources")
    outside = scoped is not None and not any(fnmatch.fnmatchcase(resource, pat) for pat in scoped if resource != "*")
    if exempt or outside:
        d = {"decision": "allowed"}
    out = {"decision": d.get("decision", "allowed"), "organizations": d.get("organizations", True),
           "boundary": d.get("boundary", True), "matched": d.get("matched")}
    if out["matched"] is None:
        out["matched"] = ["KarpenterControllerPolicy"] if out["decision"] == "allowed" else []
    return out


def xml_members(items: list[str]) -> str:
    return "".join(f"<member>{html.escape(x)}</member>" for x in items)


class Iam:
    """The IAM behaviours of lagproxy.Lag."""

    def handle_iam(self, req: Req):
        op, arn = req.operation, req.form.get("PolicyArn", "")
        if op == "GetAccountSummary":
            with self.lock:
                summary = self.rules.get("iam_account_summary")
            if summary is not None:
                return (*self.account_summary(req, summary), "iam_account_summary")
        policy = arn.rsplit("/", 1)[-1] if arn else None
        if op == "CreatePolicyVersion" and req.form.get("SetAsDefault", "").lower() == "true":
            n = self.rule("iam_policy_version_lag_s", policy)
            if n:
                # The default before the write, read upstream with the client's headers.
                q = urllib.parse.urlencode({"Action": "GetPolicy", "Version": "2010-05-08", "PolicyArn": arn})
                _, _, before = self.forward(req, body=q.encode())
                m = DEFAULT_VERSION_RE.search(before)
                status, headers, body = self.forward(req)
                if m and 200 <= status < 300:
                    with self.lock:
                        self.version_windows[arn] = {"until": time.monotonic() + n, "old": m.group(1)}
                return status, headers, body, "iam_policy_version_lag_s"
        if op == "GetPolicy" and arn:
            with self.lock:
                w = self.version_windows.get(arn)
                if w and w["until"] <= time.monotonic():
                    del self.version_windows[arn]
                    w = None
            status, headers, body = self.forward(req)
            if w and 200 <= status < 300:
                body = DEFAULT_VERSION_RE.sub(b"<DefaultVersionId>" + w["old"] + b"</DefaultVersionId>", body)
                return status, headers, body, "iam_policy_version_lag_s"
            return status, headers, body, None
        status, headers, body = self.forward(req)
        if not op.startswith(("Get", "List")) and 200 <= status < 300:
            with self.lock:
                watched = [r for r, on in (self.rules.get("iam_watch_role") or {}).items() if on]
            for r in watched:
                actions = self.role_actions(req, r)
                with self.lock:
                    self.iam_watch.setdefault(r, []).append({"after": op, "actions": actions})
        role = req.role_name()
        if op in ("CreateRole", "UpdateAssumeRolePolicy") and role and 200 <= status < 300:
            n = self.rule("eks_role_propagation_s", role)
            if n:
                with self.lock:
                    self.role_windows[role] = {"until": time.monotonic() + n,
                                               "kind": "create" if op == "CreateRole" else "trust"}
                return status, headers, body, "eks_role_propagation_s"
        return status, headers, body, None

    def account_summary(self, req: Req, rule) -> tuple[int, list, bytes]:
        """iam_account_summary: GetAccountSummary with the rule's entries over the upstream's
        (an upstream that does not answer it gives none), or AWS's refusal."""
        if rule == "AccessDenied":
            return query_error(403, "AccessDenied", "User: arn:aws:iam::000000000000:user/test is not authorized "
                                                    "to perform: iam:GetAccountSummary on resource: *")
        status, _, body = self.forward(req)
        entries: dict[str, str] = {}
        if 200 <= status < 300:
            for k, v in re.findall(rb"<entry>\s*<key>([^<]*)</key>\s*<value>([^<]*)</value>\s*</entry>", body):
                entries[k.decode()] = v.decode()
        entries.update({k: str(v) for k, v in rule.items()})
        xml = "".join(f"<entry><key>{html.escape(k)}</key><value>{html.escape(v)}</value></entry>"
                      for k, v in entries.items())
        out = ('<GetAccountSummaryResponse xmlns="https://iam.amazonaws.com/doc/2010-05-08/">'
               f"<GetAccountSummaryResult><SummaryMap>{xml}</SummaryMap></GetAccountSummaryResult>"
               f"<ResponseMetadata><RequestId>{uuid.uuid4()}</RequestId></ResponseMetadata>"
               "</GetAccountSummaryResponse>")
        return 200, [("Content-Type", "text/xml")], out.encode()

    def iam_query(self, like: Req, params: dict) -> bytes:
        """One IAM query-protocol call upstream, with the client's headers (the emulator does not
        check signatures); the response body."""
        q = urllib.parse.urlencode({"Version": "2010-05-08", **params})
        _, _, body = self.forward(like, body=q.encode())
        return body

    def role_actions(self, like: Req, role: str) -> list:
        """The actions the role's policies allow (managed: the default version; inline), sorted."""
        docs = []
        listed = self.iam_query(like, {"Action": "ListAttachedRolePolicies", "RoleName": role})
        for arn in re.findall(rb"<PolicyArn>([^<]*)</PolicyArn>", listed):
            pol = self.iam_query(like, {"Action": "GetPolicy", "PolicyArn": arn.decode()})
            m = DEFAULT_VERSION_RE.search(pol)
            if not m:
                continue
            ver = self.iam_query(like, {"Action": "GetPolicyVersion", "PolicyArn": arn.decode(),
                                        "VersionId": m.group(1).decode()})
            docs += re.findall(rb"<Document>([^<]*)</Document>", ver)
        inline = self.iam_query(like, {"Action": "ListRolePolicies", "RoleName": role})
        for name in re.findall(rb"<member>([^<]*)</member>", inline):
            got = self.iam_query(like, {"Action": "GetRolePolicy", "RoleName": role, "PolicyName": name.decode()})
            docs += re.findall(rb"<PolicyDocument>([^<]*)</PolicyDocument>", got)
        actions = set()
        for raw in docs:
            text = html.unescape(urllib.parse.unquote(raw.decode()))
            try:
                doc = json.loads(text)
            except ValueError:
                continue
            stmts = doc.get("Statement", [])
            for st in stmts if isinstance(stmts, list) else [stmts]:
                if str(st.get("Effect", "")).lower() != "allow":
                    continue
                a = st.get("Action", [])
                actions.update(a if isinstance(a, list) else [a])
        return sorted(actions)

    def handle_simulate(self, req: Req):
        """iam_simulate: SimulatePrincipalPolicy and GetContextKeysForPrincipalPolicy."""
        role = req.form.get("PolicySourceArn", "").rsplit("/", 1)[-1]
        rule = self.rule("iam_simulate", role)
        if rule is None:
            return None
        op = req.operation
        if rule == "AccessDenied":
            return (*query_error(403, "AccessDenied", f"User: arn:aws:iam::000000000000:user/test is not authorized "
                                                      f"to perform: iam:{op} on resource: {req.form.get('PolicySourceArn')}"),
                    "iam_simulate")
        keys = list(rule.get("context_keys") or [])
        rid = f"<ResponseMetadata><RequestId>{uuid.uuid4()}</RequestId></ResponseMetadata>"
        ns = 'xmlns="https://iam.amazonaws.com/doc/2010-05-08/"'
        if op == "GetContextKeysForPrincipalPolicy":
            body = (f"<GetContextKeysForPrincipalPolicyResponse {ns}><GetContextKeysForPrincipalPolicyResult>"
                    f"<ContextKeyNames>{xml_members(keys)}</ContextKeyNames>"
                    f"</GetContextKeysForPrincipalPolicyResult>{rid}</GetContextKeysForPrincipalPolicyResponse>")
            return 200, [("Content-Type", "text/xml")], body.encode(), "iam_simulate"
        asked = simulate_params(req.form)
        given = {e["key"].lower() for e in asked["context_entries"]}
        missing = [k for k in keys if k.lower() not in given]
        pairs = [(a, r) for a in asked["actions"] for r in (asked["resources"] or ["*"])]
        try:
            limit = int(req.form.get("MaxItems") or IAM_PAGE)
        except ValueError:
            limit = 0
        offset = page_offset(req.form.get("Marker"))
        if offset is None or not 1 <= limit <= 1000:
            return (*query_error(400, "InvalidInput", "Invalid Marker or MaxItems."), "iam_simulate")
        members = []
        for action, resource in pairs[offset:offset + limit]:
            d = simulate_decision(rule, action, resource, asked["context_entries"])
            matched = "".join(f"<member><SourcePolicyId>{html.escape(m)}</SourcePolicyId>"
                              "<SourcePolicyType>IAM Policy</SourcePolicyType>"
                              "<StartPosition><Line>1</Line><Column>1</Column></StartPosition>"
                              "<EndPosition><Line>1</Line><Column>100</Column></EndPosition></member>"
                              for m in d["matched"])
            members.append(
                f"<member><EvalActionName>{html.escape(action)}</EvalActionName>"
                f"<EvalResourceName>{html.escape(resource)}</EvalResourceName>"
                f"<EvalDecision>{d['decision']}</EvalDecision><MatchedStatements>{matched}</MatchedStatements>"
                f"<MissingContextValues>{xml_members(missing)}"
                "</MissingContextValues>"
                f"<OrganizationsDecisionDetail><AllowedByOrganizations>{str(d['organizations']).lower()}"
                "</AllowedByOrganizations></OrganizationsDecisionDetail>"
                f"<PermissionsBoundaryDecisionDetail><AllowedByPermissionsBoundary>{str(d['boundary']).lower()}"
                "</AllowedByPermissionsBoundary></PermissionsBoundaryDecisionDetail></member>")
        more = offset + limit < len(pairs)
        marker = f"<Marker>{page_token(offset + limit)}</Marker>" if more else ""
        body = (f"<SimulatePrincipalPolicyResponse {ns}><SimulatePrincipalPolicyResult>"
                f"<IsTruncated>{str(more).lower()}</IsTruncated><EvaluationResults>{''.join(members)}"
                f"</EvaluationResults>{marker}</SimulatePrincipalPolicyResult>{rid}</SimulatePrincipalPolicyResponse>")
        return 200, [("Content-Type", "text/xml")], body.encode(), "iam_simulate"
