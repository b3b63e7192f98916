//! `up` exits 0 only when Karpenter can work: subnets with a way out (private with a NAT route
//! first, public with public IPs only when no private one, isolated only with the VPC endpoints),
//! the node security group's control-plane rules, the Spot service-linked role, EKS Auto Mode,
//! and the Pod Identity restart note. Networks are seeded by `scripts/seed.py --network`; results
//! are read back through the EC2 and IAM APIs.

use crate::common::lag::LagProxy;
use crate::common::*;
use aws_sdk_ec2::types::{Filter, IpPermission, UserIdGroupPair};
use serde_json::{Value, json};
use std::collections::BTreeSet;

const DISCOVERY: &str = "karpenter.sh/discovery";

/// Subnets carrying the discovery tag for `c` (DescribeSubnets by tag, checked here).
fn tagged_subnets(sdk: &Sdk, c: &str) -> BTreeSet<String> {
    let f = Filter::builder().name(format!("tag:{DISCOVERY}")).values(c).build();
    let out = rt().block_on(sdk.ec2.describe_subnets().filters(f).send()).expect("DescribeSubnets");
    out.subnets()
        .iter()
        .filter(|s| s.tags().iter().any(|t| t.key() == Some(DISCOVERY) && t.value() == Some(c)))
        .filter_map(|s| s.subnet_id().map(str::to_string))
        .collect()
}

/// Seed a cluster with `network`, run `up` with a default plan, and check it succeeded and
/// tagged exactly the seed's `subnets` (a seed JSON key) after saying `says`.
fn up_on(prefix: &str, network: &str, subnets: &str, says: &str) -> (String, Workdir, Vec<String>, Sdk) {
    let c = cluster_name(prefix);
    let s = seed(&c, &["--network", network]);
    let want = str_list(&s[subnets]);
    let sdk = sdk();
    let wd = Workdir::new();
    wd.plan_for(&c, "");
    let r = karpctl(&wd, &["up", "--cluster", &c]);
    assert_eq!(r.code, 0, "{r:?}");
    assert!(r.all().contains(says), "{}", r.all());
    assert_eq!(tagged_subnets(&sdk, &c), want.iter().cloned().collect());
    (c, wd, want, sdk)
}

#[test]
fn public_and_private_subnets_tag_only_the_private_ones_and_say_why_the_rest_are_left_out() {
    let c = cluster_name("ready-pubpriv");
    let s = seed(&c, &["--network", "public+private"]);
    let (public, private) = (str_list(&s["public_subnets"]), str_list(&s["private_subnets"]));
    let sdk = sdk();
    let wd = Workdir::new();
    wd.plan_for(&c, "");

    let r = karpctl(&wd, &["diff", "--cluster", &c]);
    assert_eq!(r.code, 2, "{r:?}");
    for id in &public {
        assert!(r.all().contains(&format!("subnet {id} left out: public (default route to igw-")), "{id}: {}", r.all());
    }
    let r = karpctl(&wd, &["up", "--cluster", &c]);
    assert_eq!(r.code, 0, "{r:?}");
    assert_eq!(tagged_subnets(&sdk, &c), private.iter().cloned().collect(), "only the private subnets");
    // The association was created: restart the controller, with the exact command.
    assert!(r.stdout.contains("kubectl -n kube-system rollout restart deployment/karpenter"), "{}", r.stdout);
    // The readiness summary (the Spot role is account-wide: another test may create it).
    assert!(r.stdout.contains("Karpenter can work here:") || r.stdout.contains("checks passed"), "{}", r.stdout);

    let r = karpctl(&wd, &["up", "--cluster", &c, "--output", "json"]);
    assert_eq!((r.code, r.writes()), (0, 0), "{r:?}");
    let r = karpctl(&wd, &["up", "--cluster", &c]);
    assert!(!r.stdout.contains("rollout restart"), "no restart note when nothing changed: {}", r.stdout);
    let r = karpctl(&wd, &["diff", "--cluster", &c, "--output", "json"]);
    assert_eq!(r.code, 0, "{r:?}");
    let doc = r.json();
    assert!(checked(&doc).iter().any(|c| c == "node-sg-blocks-control-plane"), "{doc}");
}

#[test]
fn public_only_subnets_with_public_ips_are_chosen_with_a_warning() {
    let (c, wd, public, sdk) = up_on("ready-public", "public", "public_subnets", "no private subnet has a way out");

    // A public subnet that gives no public IP is left out, and said so.
    rt().block_on(
        sdk.ec2
            .modify_subnet_attribute()
            .subnet_id(&public[0])
            .map_public_ip_on_launch(aws_sdk_ec2::types::AttributeBooleanValue::builder().value(false).build())
            .send(),
    )
    .expect("ModifySubnetAttribute");
    let r = karpctl(&wd, &["diff", "--cluster", &c]);
    assert_eq!(r.code, 2, "the subnet's tags go: {r:?}");
    assert!(
        r.all().contains(&format!("subnet {} left out: public", public[0])) && r.all().contains("MapPublicIpOnLaunch"),
        "{}",
        r.all()
    );
}

#[test]
fn an_isolated_cluster_without_endpoints_fails_with_no_write_listing_each_subnet() {
    let c = cluster_name("ready-iso");
    let s = seed(&c, &["--network", "isolated"]);
    let private = str_list(&s["private_subnets"]);
    let sdk = sdk();
    let wd = Workdir::new();
    wd.plan_for(&c, "");
    for cmd in ["diff", "up"] {
        let r = karpctl(&wd, &[cmd, "--cluster", &c, "--output", "json"]);
        assert_eq!(r.code, 1, "{cmd}: {r:?}");
        let doc = r.json();
        assert_eq!(doc["stats"]["writes"], 0, "{cmd}: {doc}");
        let msg = doc["error"]["message"].as_str().unwrap_or_default();
        for id in &private {
            assert!(msg.contains(&format!("{id}: no route out")), "{cmd}: {id}: {msg}");
        }
        for ep in ["ecr.dkr", "sts", "s3"] {
            assert!(msg.contains(ep), "{cmd}: names the missing endpoint {ep}: {msg}");
        }
        assert_eq!(doc["error"]["subnets"].as_array().map(Vec::len), Some(3), "{doc}");
    }
    assert!(tagged_subnets(&sdk, &c).is_empty());
    assert!(queue(&sdk, &format!("Karpenter-{c}")).is_none(), "nothing made");

    // Named explicitly, a subnet with no way out is an error too, naming the field.
    wd.plan_for(&c, &format!("[discovery]\nsubnet_ids = [\"{}\"]\n", private[0]));
    let r = karpctl(&wd, &["up", "--cluster", &c, "--output", "json"]);
    assert_eq!(r.code, 1, "{r:?}");
    let doc = r.json();
    assert_eq!(doc["stats"]["writes"], 0, "{doc}");
    assert!(doc["error"]["message"].as_str().unwrap().contains("discovery.subnet_ids"), "{doc}");
}

/// The roles instance profile `name` holds (None: it does not exist).
fn profile_roles(sdk: &Sdk, name: &str) -> Option<Vec<String>> {
    match rt().block_on(sdk.iam.get_instance_profile().instance_profile_name(name).send()) {
        Ok(o) => Some(o.instance_profile().unwrap().roles().iter().map(|r| r.role_name().to_string()).collect()),
        Err(e) if format!("{e:?}").contains("NoSuchEntity") => None,
        Err(e) => panic!("GetInstanceProfile {name}: {e:?}"),
    }
}

#[test]
fn an_isolated_cluster_with_endpoints_is_accepted_with_its_own_instance_profile() {
    let (c, wd, _, sdk) = up_on("ready-isoep", "isolated-endpoints", "private_subnets", "the cluster is isolated");
    let r = karpctl(&wd, &["output", "--cluster", &c, "--format", "helm"]);
    assert_eq!(r.code, 0, "{r:?}");
    assert!(r.stdout.contains("  isolatedVPC: true"), "{}", r.stdout);
    assert!(!r.stdout.contains("rollout restart"), "output makes no association, so no restart note: {}", r.stdout);
    assert_eq!(karpctl(&wd, &["diff", "--cluster", &c]).code, 0);
    // No IAM endpoint: Karpenter cannot make instance profiles, so karpctl made the node's
    // (without a plan setting) and the EC2NodeClass names it instead of the role.
    let profile = format!("KarpenterNodeInstanceProfile-{c}");
    assert_eq!(profile_roles(&sdk, &profile), Some(vec![format!("KarpenterNodeRole-{c}")]));
    let r = karpctl(&wd, &["output", "--cluster", &c, "--format", "nodeclass"]);
    assert!(r.stdout.contains(&format!("\n  instanceProfile: {profile}\n")) && !r.stdout.contains("  role:"), "{}", r.stdout);
    assert_eq!(karpctl(&wd, &["output", "--cluster", &c]).json()["instance_profile"], profile.as_str());
    assert_eq!(karpctl(&wd, &["down", "--cluster", &c, "--yes"]).code, 0);
    assert_eq!(profile_roles(&sdk, &profile), None, "down removes it");
}

#[test]
fn a_node_group_without_the_control_plane_rules_is_a_warning_naming_the_rule() {
    let c = cluster_name("ready-sg");
    let s = seed(&c, &[]);
    let cluster_sg = s["cluster_security_group"].as_str().unwrap_or_default().to_string();
    let sdk = sdk();
    let wd = Workdir::new();
    wd.plan_for(&c, "");
    assert_eq!(karpctl(&wd, &["up", "--cluster", &c]).code, 0);
    let r = karpctl(&wd, &["diff", "--cluster", &c, "--output", "json"]);
    assert!(!found_codes(&r.json()).contains(&"node-sg-blocks-control-plane".to_string()), "the seed's rules pass: {}", r.stdout);

    // A node group with the webhook rule but not the kubelet one, named in the plan. (A new
    // group: ministack 1.5.33 answers RevokeSecurityGroupIngress for a group pair with true
    // and keeps the rule.)
    let vpc = s["vpc_id"].as_str().unwrap();
    let bare = rt()
        .block_on(
            sdk.ec2.create_security_group().group_name(format!("{c}-bare")).description("no kubelet rule").vpc_id(vpc).send(),
        )
        .expect("CreateSecurityGroup");
    let node_sg = bare.group_id().unwrap().to_string();
    let perm = IpPermission::builder()
        .ip_protocol("tcp")
        .from_port(443)
        .to_port(443)
        .user_id_group_pairs(UserIdGroupPair::builder().group_id(&cluster_sg).build())
        .build();
    rt().block_on(sdk.ec2.authorize_security_group_ingress().group_id(&node_sg).ip_permissions(perm).send()).expect("authorize");
    wd.plan_for(&c, &format!("[discovery]\nsecurity_group_id = \"{node_sg}\"\n"));
    let r = karpctl(&wd, &["diff", "--cluster", &c, "--output", "json"]);
    assert_eq!(r.code, 2, "out of sync (the tag moves to the named group), and a warning is no error: {r:?}");
    let doc = r.json();
    let f = first_with_code(&found(&doc), "node-sg-blocks-control-plane").cloned().unwrap_or_else(|| panic!("{doc}"));
    assert_eq!(f["severity"], "warning");
    assert!(f["fix"].as_str().unwrap().contains("10250"), "{f}");
    let r = karpctl(&wd, &["up", "--cluster", &c]);
    assert_eq!(r.code, 0, "{r:?}");
    assert!(r.stdout.contains("node-sg-blocks-control-plane") && r.stdout.contains(&node_sg), "{}", r.stdout);
}

/// Every role at the Spot service's path (AWS names it AWSServiceRoleForEC2Spot; ministack
/// 1.5.33 names it AWSServiceRoleForSpot).
fn spot_roles(sdk: &Sdk) -> Vec<String> {
    let out = rt().block_on(sdk.iam.list_roles().path_prefix(SPOT_ROLE_PATH).send()).expect("ListRoles");
    out.roles().iter().map(|r| r.role_name().to_string()).collect()
}

#[test]
fn the_spot_service_linked_role_is_a_warning_until_the_plan_opts_in_and_down_keeps_it() {
    let c = cluster_name("ready-spot");
    seed(&c, &[]);
    let sdk = sdk();
    // Account-wide: hold the write side while the role is gone; it is put back at the end.
    let _only = SPOT_ROLE.write().unwrap_or_else(|e| e.into_inner());
    remove_spot_roles(&sdk);
    let wd = Workdir::new();
    wd.plan_for(&c, "");
    let r = karpctl(&wd, &["diff", "--cluster", &c, "--output", "json"]);
    assert!(found_codes(&r.json()).contains(&"spot-service-linked-role-missing".to_string()), "{}", r.stdout);
    let r = karpctl(&wd, &["up", "--cluster", &c]);
    assert_eq!(r.code, 0, "a warning: {r:?}");
    assert!(r.stdout.contains("spot-service-linked-role-missing"), "{}", r.stdout);
    assert!(spot_roles(&sdk).is_empty(), "never made without the opt-in");

    wd.plan_for(&c, "[account]\ncreate_spot_service_linked_role = true\n");
    let r = karpctl(&wd, &["diff", "--cluster", &c, "--output", "json"]);
    assert_eq!(r.writes(), 0, "{r:?}");
    assert!(r.stderr.contains("will create it"), "{r:?}");
    let r = karpctl(&wd, &["up", "--cluster", &c, "--output", "json"]);
    assert_eq!(r.code, 0, "{r:?}");
    assert!(!found_codes(&r.json()).contains(&"spot-service-linked-role-missing".to_string()), "{}", r.stdout);
    assert_eq!(spot_roles(&sdk).len(), 1, "made once");
    let r = karpctl(&wd, &["diff", "--cluster", &c, "--output", "json"]);
    assert_eq!((r.code, r.writes()), (0, 0), "{r:?}");
    assert!(!r.stderr.contains("will create it"), "{r:?}");
    assert_eq!(karpctl(&wd, &["down", "--cluster", &c, "--yes"]).code, 0);
    assert_eq!(spot_roles(&sdk).len(), 1, "down never deletes an account-wide role");
    // Back under AWS's name, as the other tests expect it.
    remove_spot_roles(&sdk);
    ensure_spot_role(&sdk);
}

#[test]
fn an_auto_mode_cluster_needs_no_agent_add_on_and_gets_the_nodepool_warning() {
    let c = cluster_name("ready-auto");
    seed(&c, &["--no-pod-identity-agent"]);
    let wd = Workdir::new();
    wd.plan_for(&c, "");
    // Without Auto Mode the missing add-on is a refusal.
    let r = karpctl(&wd, &["diff", "--cluster", &c]);
    assert_eq!(r.code, 1, "{r:?}");
    assert!(r.stderr.contains("eks-pod-identity-agent"), "{r:?}");

    let px = LagProxy::start(&c, &endpoint());
    px.set(json!({"eks_compute_config": {&c: {"enabled": true, "nodePools": ["general-purpose", "system"]}}}));
    let r = karpctl_at(&wd, px.url(), &["up", "--cluster", &c, "--output", "json"], &[]);
    assert_eq!(r.code, 0, "{r:?}");
    assert!(found_codes(&r.json()).contains(&"auto-mode-nodepools-overlap".to_string()), "{}", r.stdout);
    assert_eq!(px.count("CreateAddon"), 0, "Auto Mode has the agent built in");
    let r = karpctl_at(&wd, px.url(), &["doctor", "--cluster", &c, "--output", "json"], &[]);
    let doc = r.json();
    assert!(!finding_codes(&doc).contains("pod-identity-agent-missing"), "no false doctor finding: {doc}");
}

/// `diff` and `up` (run through `run`) refuse before any write, exit 1, naming each of `private`
/// and saying each of `says`; returns the error message.
fn refused_naming(run: &dyn Fn(&Workdir, &[&str]) -> Run, wd: &Workdir, c: &str, private: &[String], says: &[&str]) -> String {
    let mut last = String::new();
    for cmd in ["diff", "up"] {
        let r = run(wd, &[cmd, "--cluster", c, "--output", "json"]);
        assert_eq!(r.code, 1, "{cmd}: {r:?}");
        let doc = r.json();
        assert_eq!(doc["stats"]["writes"], 0, "{cmd}: {doc}");
        let msg = doc["error"]["message"].as_str().unwrap_or_default().to_string();
        for id in private {
            assert!(msg.contains(&format!("{id}: no route out")), "{cmd}: {id}: {msg}");
        }
        for s in says {
            assert!(msg.contains(s), "{cmd}: says {s:?}: {msg}");
        }
        last = msg;
    }
    last
}

#[test]
fn a_public_only_vpc_without_public_ips_needs_associate_public_ip_and_output_sets_it() {
    // terraform-aws-vpc leaves map_public_ip_on_launch false on its public subnets.
    let c = cluster_name("ready-noip");
    let s = seed(&c, &["--network", "public", "--no-public-ip"]);
    let public = str_list(&s["public_subnets"]);
    let sdk = sdk();
    let wd = Workdir::new();
    wd.plan_for(&c, "");
    let r = karpctl(&wd, &["diff", "--cluster", &c, "--output", "json"]);
    assert_eq!(r.code, 1, "{r:?}");
    let doc = r.json();
    assert_eq!(doc["stats"]["writes"], 0, "{doc}");
    let msg = doc["error"]["message"].as_str().unwrap_or_default();
    let hint = doc["error"]["hint"].as_str().unwrap_or_default();
    for id in &public {
        assert!(msg.contains(&format!("{id}: public")) && msg.contains("MapPublicIpOnLaunch is false"), "{id}: {msg}");
        assert!(hint.contains(&format!("aws ec2 modify-subnet-attribute --subnet-id {id} --map-public-ip-on-launch")), "{hint}");
    }
    // Both ways: the plan key, or the subnets' own setting.
    assert!(hint.contains("`associate_public_ip = true` under [discovery]"), "{hint}");
    assert!(hint.contains("map_public_ip_on_launch = true"), "{hint}");

    wd.plan_for(&c, "[discovery]\nassociate_public_ip = true\n");
    let r = karpctl(&wd, &["up", "--cluster", &c]);
    assert_eq!(r.code, 0, "{r:?}");
    assert!(r.all().contains("no private subnet has a way out"), "{}", r.all());
    assert_eq!(tagged_subnets(&sdk, &c), public.iter().cloned().collect());
    let r = karpctl(&wd, &["output", "--cluster", &c, "--format", "nodeclass"]);
    assert_eq!(r.code, 0, "{r:?}");
    assert!(r.stdout.contains("\n  associatePublicIPAddress: true\n"), "{}", r.stdout);
    let r = karpctl(&wd, &["output", "--cluster", &c, "--format", "json"]);
    assert_eq!(r.json()["associate_public_ip"], true, "{}", r.stdout);
    assert_eq!(karpctl(&wd, &["diff", "--cluster", &c]).code, 0);
    // doctor reads the same plan and gives the same verdict: nodes there get public IPs.
    let r = karpctl(&wd, &["doctor", "--cluster", &c, "--output", "json"]);
    let text = r.json()["findings"].to_string();
    assert!(!text.contains("subnet-no-way-out"), "{text}");
}

#[test]
fn associate_public_ip_on_private_subnets_is_said_to_do_nothing() {
    let c = cluster_name("ready-ipunused");
    seed(&c, &["--network", "private"]);
    let wd = Workdir::new();
    wd.plan_for(&c, "[discovery]\nassociate_public_ip = true\n");
    let r = karpctl(&wd, &["up", "--cluster", &c]);
    assert_eq!(r.code, 0, "{r:?}");
    assert!(r.all().contains("`discovery.associate_public_ip = true` has no effect"), "{}", r.all());
    let r = karpctl(&wd, &["output", "--cluster", &c, "--format", "nodeclass"]);
    assert!(!r.stdout.contains("associatePublicIPAddress"), "private nodes get no public IPs: {}", r.stdout);
}

#[test]
fn public_subnets_named_by_the_plan_are_not_said_to_be_all_there_is() {
    let c = cluster_name("ready-named");
    let s = seed(&c, &["--network", "public+private"]);
    let public = str_list(&s["public_subnets"]);
    let wd = Workdir::new();
    let ids: Vec<String> = public.iter().map(|s| format!("\"{s}\"")).collect();
    wd.plan_for(&c, &format!("[discovery]\nsubnet_ids = [{}]\n", ids.join(", ")));
    let r = karpctl(&wd, &["diff", "--cluster", &c]);
    assert_eq!(r.code, 2, "{r:?}");
    // The private subnets route to a NAT gateway: saying none has a way out would be false.
    assert!(!r.all().contains("no private subnet has a way out"), "{}", r.all());
    assert!(r.all().contains("nodes go in public subnets (`discovery.subnet_ids` names them)"), "{}", r.all());
}

#[test]
fn a_peering_connection_is_no_way_out() {
    let c = cluster_name("ready-pcx");
    let s = seed(&c, &["--network", "peering"]);
    let private = str_list(&s["private_subnets"]);
    let wd = Workdir::new();
    wd.plan_for(&c, "");
    refused_naming(&karpctl, &wd, &c, &private, &["to pcx-", "VPC peering connection"]);
}

#[test]
fn an_egress_only_gateway_is_no_way_out_for_an_ipv4_cluster() {
    // ministack does not keep IPv6 routes: the VPC lives in moto.
    let c = cluster_name("ready-eigw");
    let s = seed_strict(&c, &["--network", "egress-only"]);
    let private = str_list(&s["private_subnets"]);
    let wd = Workdir::new();
    wd.plan_for(&c, "");
    refused_naming(&karpctl_strict, &wd, &c, &private, &["::/0 to eigw-", "an IPv6 route, and the cluster is IPv4"]);
}

#[test]
fn an_ipv6_cluster_needs_ipv4_egress_besides_its_egress_only_gateway() {
    // Nodes of an IPv6 cluster are dual-stack and reach ECR, STS and EC2 over IPv4. moto keeps the
    // IPv6 routes; the lag proxy shows the cluster's IPv6 family and the subnets' DNS64.
    let c = cluster_name("ready-v6");
    let s = seed_strict(&c, &["--network", "egress-only"]);
    let private = str_list(&s["private_subnets"]);
    let (_px, eps) = lag::ipv6_cluster(&c);
    let run = |wd: &Workdir, args: &[&str]| karpctl_strict_at(wd, args, &eps, &[]);
    let wd = Workdir::new();
    wd.plan_for(&c, "");
    let msg = refused_naming(&run, &wd, &c, &private, &["::/0 to eigw-", "carries IPv6 only", "IPv4 endpoints"]);
    assert!(!msg.contains("the cluster is IPv4"), "{msg}");
    let r = run(&wd, &["up", "--cluster", &c]);
    assert_eq!(r.code, 1, "{r:?}");
    let hint = r.stderr.lines().find(|l| l.starts_with("hint:")).unwrap_or_else(|| panic!("{r:?}"));
    assert!(hint.contains("a 0.0.0.0/0 route to a NAT gateway") && hint.contains("64:ff9b::/96"), "{hint}");
    for id in &private {
        assert!(hint.contains(&format!("--subnet-id {id} --enable-dns64")), "{id}: {hint}");
    }

    // NAT64 (64:ff9b::/96 to a NAT gateway) counts only with DNS64 on the subnet.
    let c = cluster_name("ready-nat64");
    let s = seed_strict(&c, &["--network", "nat64"]);
    let private = str_list(&s["private_subnets"]);
    let (px, eps) = lag::ipv6_cluster(&c);
    let run = |wd: &Workdir, args: &[&str]| karpctl_strict_at(wd, args, &eps, &[]);
    wd.plan_for(&c, "");
    let msg = refused_naming(&run, &wd, &c, &private, &["64:ff9b::/96 to nat-", "DNS64 is off on the subnet"]);
    for id in &private {
        assert!(msg.contains(id), "{id}: {msg}");
    }
    let r = run(&wd, &["diff", "--cluster", &c]);
    assert!(r.stderr.contains("but DNS64 off") && r.stderr.contains("--enable-dns64"), "{r:?}");
    assert!(!r.stderr.contains("a 0.0.0.0/0 route"), "the NAT64 route is there: only DNS64 is missing: {r:?}");
    let dns64: serde_json::Map<String, Value> = private.iter().map(|id| (id.clone(), json!(true))).collect();
    px.set(json!({"ec2_subnet_dns64": dns64}));
    let r = run(&wd, &["up", "--cluster", &c]);
    assert_eq!(r.code, 0, "NAT64 with DNS64 is a way out: {r:?}");
    assert_eq!(tagged_subnets(&sdk_strict(), &c), private.iter().cloned().collect());
    assert!(!r.all().contains("subnet-no-way-out"), "{r:?}");
}

#[test]
fn an_isolated_pod_identity_cluster_needs_the_eks_auth_endpoint() {
    let c = cluster_name("ready-noauth");
    let s = seed(&c, &["--network", "isolated-endpoints", "--without-endpoint", "eks-auth"]);
    let private = str_list(&s["private_subnets"]);
    let wd = Workdir::new();
    wd.plan_for(&c, "");
    let msg = refused_naming(&karpctl, &wd, &c, &private, &["the VPC lacks the endpoints eks-auth"]);
    assert!(!msg.contains("ecr.dkr"), "only eks-auth is missing: {msg}");
    assert!(queue(&sdk(), &format!("Karpenter-{c}")).is_none(), "nothing made");
}

#[test]
fn endpoints_count_only_as_aws_serves_them() {
    // An S3 gateway endpoint on another route table does not serve these subnets.
    let c = cluster_name("ready-s3rt");
    let s = seed(&c, &["--network", "isolated-endpoints", "--s3-endpoint-table", "public"]);
    let private = str_list(&s["private_subnets"]);
    let wd = Workdir::new();
    wd.plan_for(&c, "");
    refused_naming(&karpctl, &wd, &c, &private, &["the S3 gateway endpoint vpce-", "is not on route table rtb-"]);

    // Interface endpoints without private DNS are not used by the SDKs' default host names
    // (ministack neither keeps nor reports PrivateDnsEnabled: the VPC lives in moto).
    let c = cluster_name("ready-nodns");
    let s = seed_strict(&c, &["--network", "isolated-endpoints", "--endpoint-private-dns", "off"]);
    let private = str_list(&s["private_subnets"]);
    wd.plan_for(&c, "");
    refused_naming(&karpctl_strict, &wd, &c, &private, &["the interface endpoints of ec2, ecr.api", "have private DNS off"]);
}

#[test]
fn an_isolated_subnet_of_a_shared_vpc_is_unconfirmed_not_refused() {
    // AWS RAM: another account owns the VPC and its endpoints, which this account cannot see.
    let c = cluster_name("ready-shared");
    let s = seed(&c, &["--network", "isolated"]);
    let vpc = s["vpc_id"].as_str().unwrap().to_string();
    let px = LagProxy::start(&c, &endpoint());
    px.set(json!({"ec2_shared_vpc": {&vpc: "999988887777"}}));
    let wd = Workdir::new();
    wd.plan_for(&c, "");
    let r = karpctl_at(&wd, px.url(), &["diff", "--cluster", &c, "--output", "json"], &[]);
    assert_eq!(r.code, 2, "not refused: {r:?}");
    let doc = r.json();
    let w = first_with_code(&found(&doc), "subnet-way-out-unconfirmed").cloned().unwrap_or_else(|| panic!("{doc}"));
    assert_eq!(w["severity"], "warning", "{w}");
    assert!(w["message"].as_str().unwrap().contains("999988887777"), "{w}");
    assert!(w["fix"].as_str().unwrap().contains("eks-auth"), "{w}");
    assert!(doc.to_string().contains("the cluster is isolated"), "{doc}");
}
