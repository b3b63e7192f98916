#!/usr/bin/env python3
"""Seed an emulator with a realistic EKS cluster for karpctl to work around.

Run with the repo's venv (botocore comes with ministack):

    .venv/bin/python scripts/seed.py --cluster say-when-east [--region us-east-1]
        [--endpoint URL] [--ec2-endpoint URL] [--auth-mode API_AND_CONFIG_MAP|CONFIG_MAP|API]
        [--no-pod-identity-agent] [--extra-node-sg] [--vpc-cidr 10.42.0.0/16]

--ec2-endpoint sends the EC2 and STS calls to a second emulator (moto, in the
strict test run) while EKS stays on --endpoint (ministack): the VPC, subnets
and security groups then live in moto and the EKS cluster in ministack names
those subnet ids. The cluster role ARN uses the account STS reports; a cluster
ARN in another account (the two emulators disagree) is reported as a warning
and as "eks_account_id" in the output.

Creates (or finds, by Name tag / cluster name, when re-run):
  - VPC  Name=<c>-vpc
  - 3 public subnets  Name=<c>-public-<az>,  kubernetes.io/role/elb=1
  - 3 private subnets Name=<c>-private-<az>, kubernetes.io/role/internal-elb=1
    in <region>a/b/c
  - security group <c>-node, tagged kubernetes.io/cluster/<c>=owned and Name
  - security group <c>-unrelated (Name tag only)
  - with --extra-node-sg: security group <c>-node-extra, also tagged
    kubernetes.io/cluster/<c>=owned (makes the node group ambiguous)
  - routes (--network, default "private"): route table <c>-public (0.0.0.0/0 to
    internet gateway <c>-igw; the public subnets map public IPs on launch) and
    <c>-private (0.0.0.0/0 to NAT gateway <c>-nat in the first public subnet)
      private             the cluster on the private subnets (the usual shape)
      public+private      the cluster on both kinds
      public              the cluster on the public subnets; no NAT gateway
      isolated            no default routes at all; the cluster on the private subnets
      isolated-endpoints  isolated, plus the VPC endpoints a private cluster needs
                          (interface ec2, ecr.api, ecr.dkr, sts, ssm, eks, eks-auth, sqs;
                          gateway s3 on the private route table)
      peering             the private subnets' only default route goes to a VPC peering
                          connection <c>-pcx with VPC <c>-peer-vpc (no way out); the cluster
                          on the private subnets
      egress-only         the private subnets' only default route is ::/0 to egress-only
                          internet gateway <c>-eigw (IPv6 only); the cluster on the private
                          subnets (ministack 1.5.33 does not keep IPv6 routes: use moto)
      nat64               egress-only, plus NAT64: 64:ff9b::/96 to NAT gateway <c>-nat and
                          EnableDns64 on the private subnets (neither emulator keeps DNS64:
                          the lag proxy's ec2_subnet_dns64 shows it; use moto for the routes)
    --no-public-ip: the public subnets keep MapPublicIpOnLaunch false, as terraform-aws-vpc
    leaves them (map_public_ip_on_launch defaults to false)
    --without-endpoint SVC (repeatable): isolated-endpoints without that endpoint
    --endpoint-private-dns off: the interface endpoints are made with private DNS off
    (ministack 1.5.33 neither keeps nor reports it: use moto)
    --s3-endpoint-table public: the S3 gateway endpoint names the public route table only
    (a cluster's subnets are fixed when it is made: change --network with a new name)
  - the node group accepts the cluster security group on TCP 443 and 10250
  - EKS cluster <c>, version 1.31, on the subnets --network says, role
    arn:<p>:iam::<account>:role/<c>-cluster-role, the given authentication mode
  - the eks-pod-identity-agent add-on (unless --no-pod-identity-agent)

Re-running converges to the flags given: an existing cluster keeps its
identity; the add-on and the extra security group are added or removed to
match; a different --auth-mode is applied with UpdateClusterConfig (which
ministack 1.5.33 lacks: there the seed fails and says so). Concurrent runs
for the same endpoint/region/cluster are serialised with a lock file.

Prints one JSON object on stdout; progress goes to stderr. Exit 0 on success.
"""

from __future__ import annotations

import argparse
import fcntl
import hashlib
import ipaddress
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import NoReturn

REPO = Path(__file__).resolve().parent.parent
AUTH_MODES = ("API_AND_CONFIG_MAP", "CONFIG_MAP", "API")
K8S_VERSION = "1.31"
POD_IDENTITY_ADDON = "eks-pod-identity-agent"
NETWORKS = ("private", "public+private", "public", "isolated", "isolated-endpoints", "peering", "egress-only", "nat64")
# What a cluster without a way out needs (docs/readiness.md).
INTERFACE_ENDPOINTS = ("ec2", "ecr.api", "ecr.dkr", "sts", "ssm", "eks", "eks-auth", "sqs")


def log(msg: str) -> None:
    print(f"seed: {msg}", file=sys.stderr, flush=True)


def fail(msg: str) -> NoReturn:
    print(f"seed: error: {msg}", file=sys.stderr, flush=True)
    sys.exit(1)


def default_endpoint() -> str | None:
    emu_dir = Path(os.environ.get("KARPCTL_EMULATOR_DIR") or REPO / ".emulator")
    f = emu_dir / "endpoint"
    if f.is_file():
        text = f.read_text().strip()
        return text or None
    return None


def derived_cidr(cluster: str) -> str:
    """A /16 in 10.0.0.0/8 chosen by a stable hash of the cluster name, so
    many clusters seeded into one emulator get (mostly) distinct ranges."""
    x = hashlib.sha256(cluster.encode()).digest()[0]
    return f"10.{x}.0.0/16"


def subnet_cidrs(vpc_cidr: str) -> tuple[list[str], list[str]]:
    net = ipaddress.ip_network(vpc_cidr, strict=True)
    if net.version != 4 or net.prefixlen > 24:
        raise ValueError(f"--vpc-cidr must be an IPv4 block of /24 or larger, got {vpc_cidr}")
    # Cut into 16 equal parts: public in parts 0-2, private in parts 8-10.
    parts = list(net.subnets(prefixlen_diff=4))
    return [str(p) for p in parts[0:3]], [str(p) for p in parts[8:11]]


def parse_args(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="seed.py",
        description="Seed an AWS emulator with a realistic EKS cluster (VPC, subnets, "
        "security groups, cluster, pod identity add-on). Idempotent.",
    )
    p.add_argument("--endpoint", help="emulator URL (default: contents of "
                   "$KARPCTL_EMULATOR_DIR/endpoint, else .emulator/endpoint)")
    p.add_argument("--ec2-endpoint", help="send EC2 and STS calls here instead of --endpoint "
                   "(e.g. moto), so the VPC/subnets/security groups live there; EKS stays on --endpoint")
    p.add_argument("--region", default="us-east-1")
    p.add_argument("--cluster", required=True, help="EKS cluster name")
    p.add_argument("--auth-mode", default="API_AND_CONFIG_MAP", choices=AUTH_MODES,
                   help="accessConfig.authenticationMode (default API_AND_CONFIG_MAP)")
    p.add_argument("--no-pod-identity-agent", action="store_true",
                   help=f"do not install the {POD_IDENTITY_ADDON} add-on (removes it if present)")
    p.add_argument("--extra-node-sg", action="store_true",
                   help="add a second security group tagged kubernetes.io/cluster/<c>=owned")
    p.add_argument("--network", default="private", choices=NETWORKS,
                   help="the subnets' routes and which subnets the cluster uses (default private)")
    p.add_argument("--no-public-ip", action="store_true",
                   help="leave the public subnets' MapPublicIpOnLaunch false (terraform-aws-vpc's default)")
    p.add_argument("--without-endpoint", action="append", default=[], metavar="SVC",
                   choices=INTERFACE_ENDPOINTS + ("s3",),
                   help="isolated-endpoints without this endpoint (repeatable)")
    p.add_argument("--endpoint-private-dns", default="on", choices=("on", "off"),
                   help="PrivateDnsEnabled of the interface endpoints (default on)")
    p.add_argument("--s3-endpoint-table", default="private", choices=("private", "public"),
                   help="the route table the S3 gateway endpoint names (default private)")
    p.add_argument("--vpc-cidr", help="VPC CIDR (default: 10.X.0.0/16, X from a hash of the cluster name)")
    args = p.parse_args(argv)
    if not args.endpoint:
        args.endpoint = default_endpoint()
        if not args.endpoint:
            p.error("no --endpoint given and no .emulator/endpoint file; run: scripts/emulator start")
    args.endpoint = args.endpoint.rstrip("/")
    args.ec2_endpoint = (args.ec2_endpoint or args.endpoint).rstrip("/")
    if not args.vpc_cidr:
        args.vpc_cidr = derived_cidr(args.cluster)
    try:
        args.public_cidrs, args.private_cidrs = subnet_cidrs(args.vpc_cidr)
    except ValueError as e:
        p.error(str(e))
    return args


class Seeder:
    def __init__(self, args: argparse.Namespace):
        # Isolate from whatever AWS configuration the caller's shell carries:
        # explicit test credentials, no profiles, no config files.
        for var in ("AWS_PROFILE", "AWS_DEFAULT_PROFILE", "AWS_SESSION_TOKEN",
                    "AWS_SECURITY_TOKEN", "AWS_ROLE_ARN", "AWS_WEB_IDENTITY_TOKEN_FILE"):
            os.environ.pop(var, None)
        os.environ["AWS_CONFIG_FILE"] = os.devnull
        os.environ["AWS_SHARED_CREDENTIALS_FILE"] = os.devnull
        os.environ["AWS_EC2_METADATA_DISABLED"] = "true"

        import botocore.session
        from botocore.config import Config

        self.args = args
        self.c = args.cluster
        session = botocore.session.get_session()
        cfg = Config(
            retries={"mode": "standard", "max_attempts": 5},
            connect_timeout=5,
            read_timeout=60,
        )

        def client(service: str):
            return session.create_client(
                service,
                region_name=args.region,
                endpoint_url=args.ec2_endpoint if service in ("ec2", "sts") else args.endpoint,
                aws_access_key_id="test",
                aws_secret_access_key="test",
                config=cfg,
            )

        self.sts = client("sts")
        self.ec2 = client("ec2")
        self.eks = client("eks")

    # ------------------------------------------------------------ helpers

    @staticmethod
    def tags(pairs: dict[str, str]) -> list[dict[str, str]]:
        return [{"Key": k, "Value": v} for k, v in pairs.items()]

    def tag_spec(self, rtype: str, pairs: dict[str, str]) -> list[dict]:
        return [{"ResourceType": rtype, "Tags": self.tags(pairs)}]

    def ensure_tags(self, resource_id: str, have: list[dict] | None, want: dict[str, str]) -> None:
        current = {t["Key"]: t["Value"] for t in (have or [])}
        missing = {k: v for k, v in want.items() if current.get(k) != v}
        if missing:
            self.ec2.create_tags(Resources=[resource_id], Tags=self.tags(missing))

    @staticmethod
    def name_of(obj: dict) -> str | None:
        for t in obj.get("Tags") or []:
            if t["Key"] == "Name":
                return t["Value"]
        return None

    # ------------------------------------------------------------ pieces

    def vpc(self) -> str:
        name = f"{self.c}-vpc"
        found = self.ec2.describe_vpcs(Filters=[{"Name": "tag:Name", "Values": [name]}])["Vpcs"]
        # Guard against emulators that ignore filters: check the tag ourselves.
        found = [v for v in found if self.name_of(v) == name]
        if found:
            found.sort(key=lambda v: v["VpcId"])
            if len(found) > 1:
                log(f"warning: {len(found)} VPCs named {name}; using {found[0]['VpcId']}")
            vpc = found[0]
            if vpc.get("CidrBlock") != self.args.vpc_cidr:
                log(f"note: existing VPC {vpc['VpcId']} has CIDR {vpc.get('CidrBlock')} "
                    f"(asked {self.args.vpc_cidr}); keeping it")
            log(f"reusing VPC {vpc['VpcId']} ({name})")
            return vpc["VpcId"]
        vpc = self.ec2.create_vpc(
            CidrBlock=self.args.vpc_cidr,
            TagSpecifications=self.tag_spec("vpc", {"Name": name}),
        )["Vpc"]
        vpc_id = vpc["VpcId"]
        # Emulators sometimes drop TagSpecifications; make sure the Name sticks.
        self.ensure_tags(vpc_id, vpc.get("Tags"), {"Name": name})
        log(f"created VPC {vpc_id} ({name}, {self.args.vpc_cidr})")
        return vpc_id

    def subnets(self, vpc_id: str, kind: str, cidrs: list[str]) -> list[str]:
        role_tag = {"public": "kubernetes.io/role/elb", "private": "kubernetes.io/role/internal-elb"}[kind]
        existing = self.ec2.describe_subnets(
            Filters=[{"Name": "vpc-id", "Values": [vpc_id]}]
        )["Subnets"]
        existing = [s for s in existing if s.get("VpcId") == vpc_id]
        by_name = {}
        for s in sorted(existing, key=lambda s: s["SubnetId"]):
            by_name.setdefault(self.name_of(s), s)
        ids = []
        for suffix, cidr in zip("abc", cidrs):
            az = f"{self.args.region}{suffix}"
            name = f"{self.c}-{kind}-{az}"
            want_tags = {"Name": name, role_tag: "1"}
            s = by_name.get(name)
            if s is not None:
                self.ensure_tags(s["SubnetId"], s.get("Tags"), want_tags)
                ids.append(s["SubnetId"])
                continue
            s = self.ec2.create_subnet(
                VpcId=vpc_id,
                CidrBlock=cidr,
                AvailabilityZone=az,
                TagSpecifications=self.tag_spec("subnet", want_tags),
            )["Subnet"]
            self.ensure_tags(s["SubnetId"], s.get("Tags"), want_tags)
            log(f"created subnet {s['SubnetId']} ({name}, {cidr})")
            ids.append(s["SubnetId"])
        return ids

    def tagged_one(self, describe, key: str, name: str, vpc_id: str | None = None) -> dict | None:
        filters = [{"Name": "tag:Name", "Values": [name]}]
        if vpc_id:
            filters.append({"Name": "vpc-id", "Values": [vpc_id]})
        found = [x for x in describe(Filters=filters)[key] if self.name_of(x) == name]
        found.sort(key=lambda x: str(x))
        return found[0] if found else None

    def internet_gateway(self, vpc_id: str) -> str:
        name = f"{self.c}-igw"
        g = self.tagged_one(self.ec2.describe_internet_gateways, "InternetGateways", name)
        if g is None:
            g = self.ec2.create_internet_gateway(TagSpecifications=self.tag_spec("internet-gateway", {"Name": name}))["InternetGateway"]
            self.ensure_tags(g["InternetGatewayId"], g.get("Tags"), {"Name": name})
            log(f"created internet gateway {g['InternetGatewayId']}")
        if not any(a.get("VpcId") == vpc_id for a in g.get("Attachments") or []):
            self.ec2.attach_internet_gateway(InternetGatewayId=g["InternetGatewayId"], VpcId=vpc_id)
        return g["InternetGatewayId"]

    def nat_gateway(self, vpc_id: str, subnet_id: str) -> str:
        name = f"{self.c}-nat"
        found = self.ec2.describe_nat_gateways(Filters=[{"Name": "tag:Name", "Values": [name]}, {"Name": "vpc-id", "Values": [vpc_id]}])["NatGateways"]
        found = [n for n in found if self.name_of(n) == name and n.get("State") not in ("deleting", "deleted", "failed")]
        if found:
            return found[0]["NatGatewayId"]
        n = self.ec2.create_nat_gateway(SubnetId=subnet_id, TagSpecifications=self.tag_spec("natgateway", {"Name": name}))["NatGateway"]
        self.ensure_tags(n["NatGatewayId"], n.get("Tags"), {"Name": name})
        log(f"created NAT gateway {n['NatGatewayId']}")
        return n["NatGatewayId"]

    def route_table(self, vpc_id: str, kind: str, subnet_ids: list[str], target: dict | None) -> str:
        """Route table <c>-<kind> for these subnets, its default route to `target` (or none)."""
        name = f"{self.c}-{kind}"
        t = self.tagged_one(self.ec2.describe_route_tables, "RouteTables", name, vpc_id)
        if t is None:
            t = self.ec2.create_route_table(VpcId=vpc_id, TagSpecifications=self.tag_spec("route-table", {"Name": name}))["RouteTable"]
            self.ensure_tags(t["RouteTableId"], t.get("Tags"), {"Name": name})
            log(f"created route table {t['RouteTableId']} ({name})")
        rt = t["RouteTableId"]
        have = {a.get("SubnetId") for a in t.get("Associations") or []}
        for s in subnet_ids:
            if s not in have:
                self.ec2.associate_route_table(RouteTableId=rt, SubnetId=s)
        current = [r for r in t.get("Routes") or [] if r.get("DestinationCidrBlock") == "0.0.0.0/0"]
        want_target = target or {}
        if current and not all(current[0].get(k) == v for k, v in want_target.items()) or (current and not target):
            self.ec2.delete_route(RouteTableId=rt, DestinationCidrBlock="0.0.0.0/0")
            current = []
        if target and not current:
            self.ec2.create_route(RouteTableId=rt, DestinationCidrBlock="0.0.0.0/0", **target)
        return rt

    def endpoints(self, vpc_id: str, subnet_ids: list[str], route_tables: list[str], want: bool) -> list[str]:
        have = {e["ServiceName"]: e["VpcEndpointId"] for e in self.ec2.describe_vpc_endpoints(
            Filters=[{"Name": "vpc-id", "Values": [vpc_id]}])["VpcEndpoints"]
            if e.get("VpcId") == vpc_id and e.get("State", "").lower() not in ("deleted", "deleting")}
        prefix = f"com.amazonaws.{self.args.region}."
        every = {prefix + s: "Interface" for s in INTERFACE_ENDPOINTS}
        every[prefix + "s3"] = "Gateway"
        without = {prefix + s for s in self.args.without_endpoint}
        wanted = {n: k for n, k in every.items() if want and n not in without}
        gone = [have.pop(n) for n in every if n in have and n not in wanted]
        if gone:
            self.ec2.delete_vpc_endpoints(VpcEndpointIds=gone)
        if not want:
            return []
        for svc, kind in wanted.items():
            if svc in have:
                continue
            if kind == "Interface":
                kw = {"SubnetIds": subnet_ids, "PrivateDnsEnabled": self.args.endpoint_private_dns == "on"}
            else:
                kw = {"RouteTableIds": route_tables}
            e = self.ec2.create_vpc_endpoint(VpcId=vpc_id, ServiceName=svc, VpcEndpointType=kind, **kw)["VpcEndpoint"]
            have[svc] = e["VpcEndpointId"]
            log(f"created VPC endpoint {e['VpcEndpointId']} ({svc}, {kind})")
        return sorted(have[n] for n in wanted)

    def peering(self, vpc_id: str) -> str:
        """VPC <c>-peer-vpc and an accepted peering connection <c>-pcx with it."""
        name = f"{self.c}-peer-vpc"
        peer = self.tagged_one(self.ec2.describe_vpcs, "Vpcs", name)
        if peer is None:
            peer = self.ec2.create_vpc(CidrBlock="192.168.0.0/16", TagSpecifications=self.tag_spec("vpc", {"Name": name}))["Vpc"]
            self.ensure_tags(peer["VpcId"], peer.get("Tags"), {"Name": name})
            log(f"created VPC {peer['VpcId']} ({name})")
        pname = f"{self.c}-pcx"
        found = [x for x in self.ec2.describe_vpc_peering_connections()["VpcPeeringConnections"]
                 if self.name_of(x) == pname and (x.get("Status") or {}).get("Code") not in ("deleted", "rejected", "failed")]
        if found:
            return found[0]["VpcPeeringConnectionId"]
        pcx = self.ec2.create_vpc_peering_connection(
            VpcId=vpc_id, PeerVpcId=peer["VpcId"],
            TagSpecifications=self.tag_spec("vpc-peering-connection", {"Name": pname}))["VpcPeeringConnection"]
        pcx_id = pcx["VpcPeeringConnectionId"]
        self.ensure_tags(pcx_id, pcx.get("Tags"), {"Name": pname})
        self.ec2.accept_vpc_peering_connection(VpcPeeringConnectionId=pcx_id)
        log(f"created VPC peering connection {pcx_id} ({pname})")
        return pcx_id

    def egress_only_gateway(self, vpc_id: str) -> str:
        name = f"{self.c}-eigw"
        g = self.tagged_one(self.ec2.describe_egress_only_internet_gateways, "EgressOnlyInternetGateways", name)
        if g is None:
            g = self.ec2.create_egress_only_internet_gateway(
                VpcId=vpc_id, TagSpecifications=self.tag_spec("egress-only-internet-gateway", {"Name": name}))["EgressOnlyInternetGateway"]
            self.ensure_tags(g["EgressOnlyInternetGatewayId"], g.get("Tags"), {"Name": name})
            log(f"created egress-only internet gateway {g['EgressOnlyInternetGatewayId']}")
        return g["EgressOnlyInternetGatewayId"]

    def ipv6_route(self, rt: str, dest: str, target: dict | None) -> None:
        """The table's route to `dest` (an IPv6 block): to `target`, or none."""
        t = self.ec2.describe_route_tables(RouteTableIds=[rt])["RouteTables"][0]
        current = [r for r in t.get("Routes") or [] if r.get("DestinationIpv6CidrBlock") == dest]
        if current and (target is None or not all(current[0].get(k) == v for k, v in target.items())):
            self.ec2.delete_route(RouteTableId=rt, DestinationIpv6CidrBlock=dest)
            current = []
        if target and not current:
            self.ec2.create_route(RouteTableId=rt, DestinationIpv6CidrBlock=dest, **target)

    def network(self, vpc_id: str, public: list[str], private: list[str]) -> dict:
        net = self.args.network
        isolated = net.startswith("isolated")
        target_public = None if isolated else {"GatewayId": self.internet_gateway(vpc_id)}
        target_private = None
        if net in ("private", "public+private"):
            target_private = {"NatGatewayId": self.nat_gateway(vpc_id, public[0])}
        elif net == "peering":
            target_private = {"VpcPeeringConnectionId": self.peering(vpc_id)}
        for s in public:
            self.ec2.modify_subnet_attribute(SubnetId=s, MapPublicIpOnLaunch={"Value": not isolated and not self.args.no_public_ip})
        rt_public = self.route_table(vpc_id, "public", public, target_public)
        rt_private = self.route_table(vpc_id, "private", private, target_private)
        if net in ("egress-only", "nat64"):
            self.ipv6_route(rt_private, "::/0", {"EgressOnlyInternetGatewayId": self.egress_only_gateway(vpc_id)})
        if net == "nat64":
            self.ipv6_route(rt_private, "64:ff9b::/96", {"NatGatewayId": self.nat_gateway(vpc_id, public[0])})
            # What AWS needs besides the route; both emulators ignore it (ec2_subnet_dns64).
            for s in private:
                self.ec2.modify_subnet_attribute(SubnetId=s, EnableDns64={"Value": True})
        s3_tables = [rt_public] if self.args.s3_endpoint_table == "public" else [rt_private]
        eps = self.endpoints(vpc_id, private, s3_tables, net == "isolated-endpoints")
        on = {"private": private, "public+private": public + private, "public": public}.get(net, private)
        return {"cluster_subnets": on, "route_tables": [rt_public, rt_private], "vpc_endpoints": eps}

    def control_plane_ingress(self, node_sg: str, cluster_sg: str | None, vpc_cidr: str) -> None:
        """The node group accepts the control plane on 443 (webhooks) and 10250 (kubelet).

        From the cluster security group, as on AWS. moto's EKS invents a cluster security group
        id that EC2 does not know (InvalidGroup.NotFound): there the rule names the VPC's range,
        which some real clusters use too."""
        from botocore.exceptions import ClientError

        def allow(port: int, source: dict) -> None:
            try:
                self.ec2.authorize_security_group_ingress(GroupId=node_sg, IpPermissions=[{
                    "IpProtocol": "tcp", "FromPort": port, "ToPort": port, **source}])
            except ClientError as e:
                if e.response.get("Error", {}).get("Code") != "InvalidPermission.Duplicate":
                    raise

        by_group = bool(cluster_sg)
        for port in (443, 10250):
            if by_group:
                try:
                    allow(port, {"UserIdGroupPairs": [{"GroupId": cluster_sg, "Description": "EKS control plane"}]})
                    continue
                except ClientError as e:
                    if e.response.get("Error", {}).get("Code") != "InvalidGroup.NotFound":
                        raise
                    log(f"the cluster security group {cluster_sg} is not in EC2 (emulator gap); "
                        f"the control plane is let in from {vpc_cidr}")
                    by_group = False
            allow(port, {"IpRanges": [{"CidrIp": vpc_cidr, "Description": "EKS control plane"}]})

    def find_sg(self, vpc_id: str, group_name: str) -> dict | None:
        found = self.ec2.describe_security_groups(
            Filters=[
                {"Name": "vpc-id", "Values": [vpc_id]},
                {"Name": "group-name", "Values": [group_name]},
            ]
        )["SecurityGroups"]
        found = [g for g in found if g.get("GroupName") == group_name and g.get("VpcId") == vpc_id]
        found.sort(key=lambda g: g["GroupId"])
        return found[0] if found else None

    def security_group(self, vpc_id: str, group_name: str, description: str,
                       extra_tags: dict[str, str]) -> str:
        want_tags = {"Name": group_name, **extra_tags}
        g = self.find_sg(vpc_id, group_name)
        if g is not None:
            self.ensure_tags(g["GroupId"], g.get("Tags"), want_tags)
            return g["GroupId"]
        g = self.ec2.create_security_group(
            GroupName=group_name,
            Description=description,
            VpcId=vpc_id,
            TagSpecifications=self.tag_spec("security-group", want_tags),
        )
        gid = g["GroupId"]
        self.ensure_tags(gid, g.get("Tags"), want_tags)
        log(f"created security group {gid} ({group_name})")
        return gid

    def remove_sg(self, vpc_id: str, group_name: str) -> None:
        g = self.find_sg(vpc_id, group_name)
        if g is not None:
            self.ec2.delete_security_group(GroupId=g["GroupId"])
            log(f"deleted security group {g['GroupId']} ({group_name})")

    def describe_cluster(self) -> dict | None:
        try:
            return self.eks.describe_cluster(name=self.c)["cluster"]
        except self.eks.exceptions.ResourceNotFoundException:
            return None

    def wait_cluster_active(self, timeout: float = 120) -> dict:
        deadline = time.monotonic() + timeout
        while True:
            cl = self.describe_cluster()
            if cl is None:
                fail(f"cluster {self.c} vanished while waiting for it")
            status = cl.get("status")
            if status == "ACTIVE":
                return cl
            if status == "FAILED":
                fail(f"cluster {self.c} is FAILED")
            if time.monotonic() >= deadline:
                fail(f"cluster {self.c} not ACTIVE after {timeout:.0f}s (status {status})")
            time.sleep(1)

    def cluster(self, account: str, partition: str, subnets: list[str]) -> dict:
        mode = self.args.auth_mode
        cl = self.describe_cluster()
        if cl is None:
            role_arn = f"arn:{partition}:iam::{account}:role/{self.c}-cluster-role"
            try:
                self.eks.create_cluster(
                    name=self.c,
                    version=K8S_VERSION,
                    roleArn=role_arn,
                    # Like a private cluster: the control plane ENIs sit in the
                    # private subnets. securityGroupIds would be *extra*
                    # control-plane groups; a typical cluster passes none.
                    resourcesVpcConfig={
                        "subnetIds": subnets,
                        "endpointPublicAccess": True,
                        "endpointPrivateAccess": True,
                    },
                    accessConfig={
                        "authenticationMode": mode,
                        "bootstrapClusterCreatorAdminPermissions": True,
                    },
                )
                log(f"created EKS cluster {self.c} ({mode})")
            except self.eks.exceptions.ResourceInUseException:
                log(f"cluster {self.c} appeared concurrently; reusing it")
        else:
            log(f"reusing EKS cluster {self.c}")
        cl = self.wait_cluster_active()
        have = (cl.get("accessConfig") or {}).get("authenticationMode")
        if have and have != mode:
            log(f"cluster {self.c} has authenticationMode {have}; updating to {mode}")
            from botocore.exceptions import ClientError

            try:
                self.eks.update_cluster_config(
                    name=self.c, accessConfig={"authenticationMode": mode}
                )
            except ClientError as e:
                # ministack 1.5.33 has no UpdateClusterConfig ("No route for
                # POST /clusters/<c>/update-config").
                fail(f"cluster {self.c} exists with authenticationMode {have} and it could "
                     f"not be changed to {mode} ({e.response.get('Error', {}).get('Message')}); "
                     f"seed a new cluster name, or restart the emulator")
            # UpdateClusterConfig is asynchronous: wait for the mode to show.
            deadline = time.monotonic() + 120
            while True:
                cl = self.wait_cluster_active()
                if (cl.get("accessConfig") or {}).get("authenticationMode") == mode:
                    break
                if time.monotonic() >= deadline:
                    fail(f"cluster {self.c} authenticationMode still not {mode} after 120s")
                time.sleep(1)
        return cl

    def addon(self, want: bool) -> str | None:
        try:
            a = self.eks.describe_addon(clusterName=self.c, addonName=POD_IDENTITY_ADDON)["addon"]
        except self.eks.exceptions.ResourceNotFoundException:
            a = None
        if want and a is None:
            try:
                self.eks.create_addon(clusterName=self.c, addonName=POD_IDENTITY_ADDON)
                log(f"created add-on {POD_IDENTITY_ADDON}")
            except self.eks.exceptions.ResourceInUseException:
                pass
        elif not want and a is not None:
            self.eks.delete_addon(clusterName=self.c, addonName=POD_IDENTITY_ADDON)
            log(f"deleted add-on {POD_IDENTITY_ADDON}")
            return None
        if not want:
            return None
        deadline = time.monotonic() + 60
        while True:
            a = self.eks.describe_addon(clusterName=self.c, addonName=POD_IDENTITY_ADDON)["addon"]
            if a.get("status") in ("ACTIVE", "DEGRADED") or time.monotonic() >= deadline:
                return a.get("status")
            time.sleep(1)

    # ------------------------------------------------------------ main

    def run(self) -> dict:
        a = self.args
        ident = self.sts.get_caller_identity()
        account = ident["Account"]
        partition = ident["Arn"].split(":")[1] if ident.get("Arn", "").startswith("arn:") else "aws"
        vpc_id = self.vpc()
        public = self.subnets(vpc_id, "public", a.public_cidrs)
        private = self.subnets(vpc_id, "private", a.private_cidrs)
        owned = {f"kubernetes.io/cluster/{self.c}": "owned"}
        node_sg = self.security_group(
            vpc_id, f"{self.c}-node", f"Node security group for EKS cluster {self.c}", owned)
        unrelated_sg = self.security_group(
            vpc_id, f"{self.c}-unrelated", "Unrelated security group (not for nodes)", {})
        extra_sg = None
        if a.extra_node_sg:
            extra_sg = self.security_group(
                vpc_id, f"{self.c}-node-extra",
                f"Second node-looking security group for EKS cluster {self.c}", owned)
        else:
            self.remove_sg(vpc_id, f"{self.c}-node-extra")
        net = self.network(vpc_id, public, private)
        cl = self.cluster(account, partition, net["cluster_subnets"])
        addon_status = self.addon(not a.no_pod_identity_agent)
        vpc_cfg = cl.get("resourcesVpcConfig") or {}
        self.control_plane_ingress(node_sg, vpc_cfg.get("clusterSecurityGroupId"), a.vpc_cidr)
        arn_parts = (cl.get("arn") or "").split(":")
        eks_account = arn_parts[4] if len(arn_parts) > 5 else None
        if eks_account and eks_account != account:
            log(f"warning: STS ({a.ec2_endpoint}) reports account {account} but the EKS cluster "
                f"ARN is in account {eks_account} ({a.endpoint}); start both emulators with one "
                f"account (moto: MOTO_ACCOUNT_ID, ministack: MINISTACK_ACCOUNT_ID)")
        return {
            "cluster": self.c,
            "region": a.region,
            "account_id": account,
            "vpc_id": vpc_id,
            "public_subnets": public,
            "private_subnets": private,
            "network": a.network,
            "cluster_subnets": net["cluster_subnets"],
            "route_tables": net["route_tables"],
            "vpc_endpoints": net["vpc_endpoints"],
            "node_security_group": node_sg,
            "unrelated_security_group": unrelated_sg,
            "extra_node_security_group": extra_sg,
            "cluster_security_group": vpc_cfg.get("clusterSecurityGroupId"),
            "cluster_arn": cl.get("arn"),
            "cluster_endpoint": cl.get("endpoint"),
            "authentication_mode": (cl.get("accessConfig") or {}).get("authenticationMode"),
            "pod_identity_agent": addon_status,
            "vpc_cidr": a.vpc_cidr,
            "endpoint": a.endpoint,
            "ec2_endpoint": a.ec2_endpoint,
            "eks_account_id": eks_account,
        }


def main(argv: list[str]) -> int:
    args = parse_args(argv)
    try:
        import botocore  # noqa: F401
    except ImportError:
        fail("botocore is missing: run this with the repo's venv (.venv/bin/python), "
             "after scripts/emulator install")
    from botocore.exceptions import BotoCoreError, ClientError

    where = args.endpoint if args.ec2_endpoint == args.endpoint else f"{args.endpoint}+{args.ec2_endpoint}"
    lock_key = hashlib.sha256(f"{where}|{args.region}|{args.cluster}".encode()).hexdigest()[:16]
    lock_path = Path(tempfile.gettempdir()) / f"karpctl-seed-{lock_key}.lock"
    with open(lock_path, "w") as lock_fh:
        fcntl.flock(lock_fh, fcntl.LOCK_EX)
        try:
            out = Seeder(args).run()
        except ClientError as e:
            err = e.response.get("Error", {})
            fail(f"{e.operation_name}: {err.get('Code')}: {err.get('Message')}")
        except BotoCoreError as e:
            where = args.endpoint if args.ec2_endpoint == args.endpoint else f"{args.endpoint} and {args.ec2_endpoint}"
            fail(f"{e} (is the emulator running at {where}?)")
        finally:
            fcntl.flock(lock_fh, fcntl.LOCK_UN)
    print(json.dumps(out, sort_keys=False))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
