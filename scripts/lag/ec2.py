"""EC2: ec2_shared_vpc and ec2_subnet_dns64 (emulator gaps), edits of the XML answers."""

from __future__ import annotations

import re

from .wire import Req

# ec2_shared_vpc: the EC2 answers it changes, and the list element each one's items are in.
SHARED_VPC_SETS = {"DescribeSubnets": b"subnetSet", "DescribeVpcs": b"vpcSet", "DescribeVpcEndpoints": b"vpcEndpointSet"}


ITEM_RE = re.compile(rb"<item>|</item>|<item/>")


VPC_ID_RE = re.compile(rb"<vpcId>([^<]*)</vpcId>")


OWNER_ID_RE = re.compile(rb"<ownerId>[^<]*</ownerId>")


SUBNET_ID_RE = re.compile(rb"<subnetId>([^<]*)</subnetId>")


DNS64_RE = re.compile(rb"<enableDns64>[^<]*</enableDns64>")


def top_items(body: bytes, set_tag: bytes) -> list[tuple[int, int]]:
    """(start, end) of each top-level <item> of the first <set_tag> element of an EC2 answer
    (items nest: a subnet's tags are items too)."""
    begin = body.find(b"<" + set_tag + b">")
    close = body.find(b"</" + set_tag + b">", begin)
    if begin < 0 or close < 0:
        return []
    spans, depth, start = [], 0, 0
    for m in ITEM_RE.finditer(body, begin, close):
        tok = m.group()
        if tok == b"<item/>":
            if depth == 0:
                spans.append((m.start(), m.end()))
        elif tok == b"<item>":
            if depth == 0:
                start = m.start()
            depth += 1
        else:
            depth -= 1
            if depth == 0:
                spans.append((start, m.end()))
    return spans


class Ec2:
    """The EC2 behaviours of lagproxy.Lag."""

    def handle_ec2_shared_vpc(self, req: Req):
        """ec2_shared_vpc: the answer as a participant of the owner's shared VPC sees it."""
        with self.lock:
            shared = dict(self.rules.get("ec2_shared_vpc") or {})
        status, headers, body = self.forward(req)
        if not shared or not 200 <= status < 300:
            return status, headers, body, None
        out, last = [], 0
        for start, end in top_items(body, SHARED_VPC_SETS[req.operation]):
            item = body[start:end]
            m = VPC_ID_RE.search(item)
            owner = (shared.get(m.group(1).decode()) or shared.get("*")) if m else None
            if owner is None:
                continue
            if req.operation == "DescribeVpcEndpoints":
                item = b""
            else:
                item = OWNER_ID_RE.sub(b"<ownerId>" + owner.encode() + b"</ownerId>", item, count=1)
            out += [body[last:start], item]
            last = end
        if not out:
            return status, headers, body, None
        return status, headers, b"".join(out) + body[last:], "ec2_shared_vpc"

    def with_dns64(self, status: int, body: bytes) -> tuple[bytes, str | None]:
        """ec2_subnet_dns64: a DescribeSubnets answer with enableDns64 true for the rule's subnets."""
        with self.lock:
            on = dict(self.rules.get("ec2_subnet_dns64") or {})
        if not on or not 200 <= status < 300:
            return body, None
        out, last = [], 0
        for start, end in top_items(body, b"subnetSet"):
            item = body[start:end]
            m = SUBNET_ID_RE.search(item)
            if not m or not (on.get(m.group(1).decode(), on.get("*"))):
                continue
            if DNS64_RE.search(item):
                item = DNS64_RE.sub(b"<enableDns64>true</enableDns64>", item, count=1)
            else:
                close = item.rfind(b"</item>")
                item = item[:close] + b"<enableDns64>true</enableDns64>" + item[close:]
            out += [body[last:start], item]
            last = end
        if not out:
            return body, None
        return b"".join(out) + body[last:], "ec2_subnet_dns64"
