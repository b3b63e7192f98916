//! Discovery tags: `karpenter.sh/discovery=<c>` on the right subnets and exactly one security
//! group, with karpctl's marker `karpctl.io/discovery=<c>`, and a clean way back. Every result
//! is read back through the EC2 API (DescribeTags / DescribeSubnets / DescribeSecurityGroups).
//!
//! Emulator gap (docs/aws-behaviour.md section 8): ministack's DeleteTags ignores the value and deletes the key
//! whatever its value. That makes the "survives down" checks here stricter than AWS would be: a
//! DeleteTags naming `karpenter.sh/discovery` on an object whose tag karpctl did not add would
//! remove it on the emulator, so any such call shows up as a lost tag.

use crate::common::*;
use aws_sdk_ec2::types::{Filter, Tag};
use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet};

type Tags = BTreeMap<String, String>;

/// What `scripts/seed.py` made for one cluster.
struct Seeded {
    vpc: String,
    public: Vec<String>,
    private: Vec<String>,
    node_sg: String,
    unrelated_sg: String,
    extra_sg: Option<String>,
    cluster_sg: Option<String>,
}

impl Seeded {
    fn of(c: &str, extra: &[&str]) -> Seeded {
        let v = seed(c, extra);
        let list = |k: &str| str_list(&v[k]);
        let s = |k: &str| v[k].as_str().map(str::to_string);
        let seeded = Seeded {
            vpc: s("vpc_id").expect("vpc_id"),
            public: list("public_subnets"),
            private: list("private_subnets"),
            node_sg: s("node_security_group").expect("node_security_group"),
            unrelated_sg: s("unrelated_security_group").expect("unrelated_security_group"),
            extra_sg: s("extra_node_security_group"),
            cluster_sg: s("cluster_security_group"),
        };
        assert_eq!(seeded.public.len(), 3, "{v}");
        assert_eq!(seeded.private.len(), 3, "{v}");
        seeded
    }

    fn subnets(&self) -> Vec<String> {
        self.public.iter().chain(&self.private).cloned().collect()
    }

    fn groups(&self) -> Vec<String> {
        let mut g = vec![self.node_sg.clone(), self.unrelated_sg.clone()];
        g.extend(self.extra_sg.clone());
        // The cluster security group EKS reports (ministack's does not exist in EC2: it then
        // simply has no tags, which is what is checked).
        g.extend(self.cluster_sg.clone().filter(|s| !s.is_empty()));
        g
    }

    fn all(&self) -> Vec<String> {
        self.subnets().into_iter().chain(self.groups()).collect()
    }
}

const PUBLIC_FILTER: &str = "[discovery]\nsubnet_tags = { \"kubernetes.io/role/elb\" = \"1\" }\n";

/// Every tag of one object (DescribeTags by resource id; re-checked here).
fn tags_of(sdk: &Sdk, id: &str) -> Tags {
    rt().block_on(async {
        let mut out = Tags::new();
        let mut token: Option<String> = None;
        loop {
            let o = sdk
                .ec2
                .describe_tags()
                .filters(Filter::builder().name("resource-id").values(id).build())
                .set_next_token(token)
                .send()
                .await
                .unwrap();
            for t in o.tags() {
                if t.resource_id() == Some(id) {
                    out.insert(t.key().unwrap_or_default().to_string(), t.value().unwrap_or_default().to_string());
                }
            }
            token = o.next_token().filter(|t| !t.is_empty()).map(str::to_string);
            if token.is_none() {
                return out;
            }
        }
    })
}

fn add_tags(sdk: &Sdk, id: &str, pairs: &[(&str, &str)]) {
    rt().block_on(async {
        let tags: Vec<Tag> = pairs.iter().map(|(k, v)| Tag::builder().key(*k).value(*v).build()).collect();
        sdk.ec2.create_tags().resources(id).set_tags(Some(tags)).send().await.unwrap();
    });
}

fn delete_tag(sdk: &Sdk, id: &str, k: &str, v: &str) {
    rt().block_on(async {
        sdk.ec2.delete_tags().resources(id).tags(Tag::builder().key(k).value(v).build()).send().await.unwrap();
    });
}

/// Region-wide: every subnet and security group whose tags say `karpenter.sh/discovery=<c>`
/// (all objects listed without filters, the tag checked here).
fn tagged_for(sdk: &Sdk, c: &str) -> BTreeSet<String> {
    rt().block_on(async {
        let mut out = BTreeSet::new();
        let carries = |tags: &[Tag]| tags.iter().any(|t| t.key() == Some(DISCOVERY) && t.value() == Some(c));
        let mut token: Option<String> = None;
        loop {
            let o = sdk.ec2.describe_subnets().set_next_token(token).send().await.unwrap();
            out.extend(o.subnets().iter().filter(|s| carries(s.tags())).map(|s| s.subnet_id().unwrap().to_string()));
            token = o.next_token().filter(|t| !t.is_empty()).map(str::to_string);
            if token.is_none() {
                break;
            }
        }
        let mut token: Option<String> = None;
        loop {
            let o = sdk.ec2.describe_security_groups().set_next_token(token).send().await.unwrap();
            out.extend(o.security_groups().iter().filter(|g| carries(g.tags())).map(|g| g.group_id().unwrap().to_string()));
            token = o.next_token().filter(|t| !t.is_empty()).map(str::to_string);
            if token.is_none() {
                break;
            }
        }
        out
    })
}

/// (Availability Zone, free addresses) of each subnet, as EC2 reports them.
fn subnet_facts(sdk: &Sdk, ids: &[String]) -> BTreeMap<String, (String, i64)> {
    rt().block_on(async {
        let o = sdk.ec2.describe_subnets().set_subnet_ids(Some(ids.to_vec())).send().await.unwrap();
        o.subnets()
            .iter()
            .filter(|s| ids.iter().any(|i| Some(i.as_str()) == s.subnet_id()))
            .map(|s| {
                (
                    s.subnet_id().unwrap().to_string(),
                    (s.availability_zone().unwrap().to_string(), s.available_ip_address_count().map(i64::from).unwrap_or(-1)),
                )
            })
            .collect()
    })
}

fn assert_ours(sdk: &Sdk, c: &str, id: &str) {
    let t = tags_of(sdk, id);
    assert_eq!(t.get(DISCOVERY).map(String::as_str), Some(c), "{id} must carry {DISCOVERY}={c}: {t:?}");
    assert_eq!(t.get(MARKER).map(String::as_str), Some(c), "{id} must carry the marker {MARKER}={c}: {t:?}");
}

fn assert_untagged(sdk: &Sdk, id: &str) {
    let t = tags_of(sdk, id);
    assert!(!t.contains_key(DISCOVERY), "{id} must carry no {DISCOVERY} tag: {t:?}");
    assert!(!t.contains_key(MARKER), "{id} must carry no {MARKER} tag: {t:?}");
}

fn set(ids: &[String]) -> BTreeSet<String> {
    ids.iter().cloned().collect()
}

fn step_action(doc: &Value, id: &str) -> Option<String> {
    doc["steps"].as_array()?.iter().find(|s| s["id"] == id).map(|s| s["action"].as_str().unwrap_or_default().to_string())
}

fn node_id(object: &str) -> String {
    format!("discovery-tags-{object}")
}

/// A failed run in JSON mode: exit 1, its error message (with the hint and causes), no write.
fn failed_without_writes(r: &Run, what: &str) -> String {
    assert_eq!(r.code, 1, "{what}: {r:?}");
    let doc = r.json();
    assert!(doc.get("error").is_some(), "{what}: an error document: {doc}");
    assert_eq!(doc["stats"]["writes"], 0, "{what}: no write call: {doc}");
    format!("{} {} {}", doc["error"]["message"].as_str().unwrap_or_default(), doc["error"]["hint"], doc["error"]["causes"])
}

#[test]
fn default_selection_tags_the_cluster_subnets_and_only_the_node_group() {
    let c = cluster_name("disc-default");
    let s = Seeded::of(&c, &[]);
    let sdk = sdk();
    let wd = Workdir::new();
    wd.plan_for(&c, "");
    let r = karpctl(&wd, &["up", "--cluster", &c]);
    assert_eq!(r.code, 0, "{r:?}");

    // The cluster's own subnets (the seed puts the cluster in its private ones) and the group
    // tagged kubernetes.io/cluster/<c>=owned.
    for id in s.private.iter().chain([&s.node_sg]) {
        assert_ours(&sdk, &c, id);
    }
    for id in s.public.iter().chain([&s.unrelated_sg]).chain(s.cluster_sg.iter()) {
        assert_untagged(&sdk, id);
    }
    // Region-wide, nothing else carries the tag for this cluster: Karpenter sees exactly these.
    let want: BTreeSet<String> = s.private.iter().cloned().chain([s.node_sg.clone()]).collect();
    assert_eq!(tagged_for(&sdk, &c), want);

    // Idempotent: nothing left to write, and diff is in sync.
    let r = karpctl(&wd, &["up", "--cluster", &c, "--output", "json"]);
    assert_eq!(r.code, 0, "{r:?}");
    assert_eq!(r.writes(), 0, "second up writes nothing: {}", r.stdout);
    let r = karpctl(&wd, &["diff", "--cluster", &c]);
    assert_eq!(r.code, 0, "{r:?}");
}

#[test]
fn a_tag_filter_selects_the_public_subnets_and_switching_removes_the_marked_tags() {
    let c = cluster_name("disc-filter");
    let s = Seeded::of(&c, &[]);
    let sdk = sdk();
    let wd = Workdir::new();

    // First the default (private subnets), then the plan switches to the public ones.
    wd.plan_for(&c, "");
    assert_eq!(karpctl(&wd, &["up", "--cluster", &c]).code, 0);
    for id in &s.private {
        assert_ours(&sdk, &c, id);
    }
    let before: BTreeMap<String, Tags> = s.private.iter().map(|id| (id.clone(), tags_of(&sdk, id))).collect();

    wd.plan_for(&c, PUBLIC_FILTER);
    let r = karpctl(&wd, &["diff", "--cluster", &c, "--output", "json"]);
    assert_eq!(r.code, 2, "{r:?}");
    let doc = r.json();
    for id in &s.public {
        assert_eq!(step_action(&doc, &node_id(id)).as_deref(), Some("create"), "{id}: {doc}");
    }
    for id in &s.private {
        let a = step_action(&doc, &node_id(id)).unwrap_or_else(|| panic!("no step untags {id}: {doc}"));
        assert!(matches!(a.as_str(), "delete" | "destroy"), "{id} is untagged: {a}");
    }
    assert_eq!(step_action(&doc, &node_id(&s.node_sg)), None, "the security group is unchanged: {doc}");
    assert_eq!(doc["summary"]["add"], 3, "{doc}");
    assert_eq!(doc["summary"]["destroy"], 3, "{doc}");
    assert_eq!(doc["stats"]["writes"], 0, "diff writes nothing");

    let r = karpctl(&wd, &["up", "--cluster", &c]);
    assert_eq!(r.code, 0, "{r:?}");
    for id in s.public.iter().chain([&s.node_sg]) {
        assert_ours(&sdk, &c, id);
    }
    for id in &s.private {
        assert_untagged(&sdk, id);
        // Only karpctl's two tags went; the seed's own tags (Name, internal-elb role) stay.
        let mut expect = before[id].clone();
        expect.remove(DISCOVERY);
        expect.remove(MARKER);
        assert_eq!(tags_of(&sdk, id), expect, "{id}");
    }
    let want: BTreeSet<String> = s.public.iter().cloned().chain([s.node_sg.clone()]).collect();
    assert_eq!(tagged_for(&sdk, &c), want);
    let r = karpctl(&wd, &["diff", "--cluster", &c]);
    assert_eq!(r.code, 0, "{r:?}");
}

#[test]
fn two_candidate_groups_fail_listing_both_with_no_write() {
    let c = cluster_name("disc-twosg");
    let s = Seeded::of(&c, &["--extra-node-sg"]);
    let extra = s.extra_sg.clone().expect("the seed made a second node-looking group");
    let sdk = sdk();
    let wd = Workdir::new();
    wd.plan_for(&c, "");

    for cmd in ["diff", "up"] {
        let r = karpctl(&wd, &[cmd, "--cluster", &c, "--output", "json"]);
        let msg = failed_without_writes(&r, cmd);
        assert!(msg.contains(&s.node_sg) && msg.contains(&extra), "{cmd}: both candidates are listed: {msg}");
        assert!(
            msg.contains("security_group_id") || msg.contains("security_group_name"),
            "{cmd}: asks the plan to name one: {msg}"
        );
    }
    let r = karpctl(&wd, &["up", "--cluster", &c]);
    assert_eq!(r.code, 1, "{r:?}");
    assert!(r.stderr.contains(&s.node_sg) && r.stderr.contains(&extra), "human error lists both: {r:?}");
    for id in s.all() {
        assert_untagged(&sdk, &id);
    }
    assert!(tagged_for(&sdk, &c).is_empty());

    // Naming one in the plan resolves it: that one is tagged, the other is not.
    wd.plan_for(&c, &format!("[discovery]\nsecurity_group_id = \"{extra}\"\n"));
    let r = karpctl(&wd, &["up", "--cluster", &c]);
    assert_eq!(r.code, 0, "{r:?}");
    assert_ours(&sdk, &c, &extra);
    assert_untagged(&sdk, &s.node_sg);
    assert_untagged(&sdk, &s.unrelated_sg);
}

#[test]
fn a_pre_existing_discovery_tag_is_reported_never_marked_and_survives_down() {
    let c = cluster_name("disc-preex");
    let s = Seeded::of(&c, &[]);
    let sdk = sdk();
    add_tags(&sdk, &s.node_sg, &[(DISCOVERY, c.as_str())]);
    let wd = Workdir::new();
    wd.plan_for(&c, "");

    let r = karpctl(&wd, &["diff", "--cluster", &c, "--output", "json"]);
    assert_eq!(r.code, 2, "the subnets are still to be tagged: {r:?}");
    let doc = r.json();
    assert_eq!(step_action(&doc, &node_id(&s.node_sg)), None, "nothing to do on the group: {doc}");
    let reported = plan_notes(&doc).into_iter().any(|(_, _, m)| {
        m.contains(&s.node_sg)
            && (m.contains("pre-existing") || m.contains("not managed by karpctl") || m.contains("not added by karpctl"))
    });
    assert!(reported, "the group's tag is reported as pre-existing: {doc}");
    let r = karpctl(&wd, &["diff", "--cluster", &c]);
    assert!(r.stdout.contains(&s.node_sg), "human diff names the group: {r:?}");

    let r = karpctl(&wd, &["up", "--cluster", &c]);
    assert_eq!(r.code, 0, "{r:?}");
    let t = tags_of(&sdk, &s.node_sg);
    assert_eq!(t.get(DISCOVERY).map(String::as_str), Some(c.as_str()), "{t:?}");
    assert!(!t.contains_key(MARKER), "a pre-existing tag never gets the marker: {t:?}");
    for id in &s.private {
        assert_ours(&sdk, &c, id);
    }
    let r = karpctl(&wd, &["diff", "--cluster", &c]);
    assert_eq!(r.code, 0, "{r:?}");

    let r = karpctl(&wd, &["down", "--cluster", &c, "--yes"]);
    assert_eq!(r.code, 0, "{r:?}");
    let t = tags_of(&sdk, &s.node_sg);
    assert_eq!(t.get(DISCOVERY).map(String::as_str), Some(c.as_str()), "the pre-existing tag survives down: {t:?}");
    assert!(!t.contains_key(MARKER), "{t:?}");
    for id in &s.private {
        assert_untagged(&sdk, id);
    }
    assert_eq!(tagged_for(&sdk, &c), set(&[s.node_sg.clone()]));
}

#[test]
fn other_tags_on_subnets_and_groups_survive_up_and_down() {
    let c = cluster_name("disc-others");
    let s = Seeded::of(&c, &[]);
    let sdk = sdk();
    // Same key prefixes as karpctl's two tags, another cluster's discovery-looking key, and
    // ordinary tags; plus the seed's own (Name, kubernetes.io/role/*, kubernetes.io/cluster/<c>).
    let extra: [(&str, &str); 4] = [
        ("karpenter.sh/discovery-extra", "x"),
        ("karpctl.io/discovery-note", "y"),
        ("karpctl.io/discoveryx", c.as_str()),
        ("team", "platform"),
    ];
    for id in s.all().iter().filter(|id| Some(*id) != s.cluster_sg.as_ref()) {
        add_tags(&sdk, id, &extra);
    }
    let before: BTreeMap<String, Tags> = s.all().into_iter().map(|id| (id.clone(), tags_of(&sdk, &id))).collect();
    assert!(before[&s.node_sg].contains_key(&format!("kubernetes.io/cluster/{c}")), "{before:?}");
    assert!(before[&s.private[0]].contains_key("Name"), "{before:?}");

    let wd = Workdir::new();
    wd.plan_for(&c, "");
    let r = karpctl(&wd, &["up", "--cluster", &c]);
    assert_eq!(r.code, 0, "{r:?}");
    for (id, was) in &before {
        let now = tags_of(&sdk, id);
        let mut expect = was.clone();
        if s.private.contains(id) || id == &s.node_sg {
            expect.insert(DISCOVERY.into(), c.clone());
            expect.insert(MARKER.into(), c.clone());
        }
        assert_eq!(now, expect, "{id}: up only adds karpctl's two tags");
    }

    let r = karpctl(&wd, &["down", "--cluster", &c, "--yes"]);
    assert_eq!(r.code, 0, "{r:?}");
    for (id, was) in &before {
        assert_eq!(&tags_of(&sdk, id), was, "{id}: down removes exactly karpctl's two tags and nothing else");
    }
    assert!(tagged_for(&sdk, &c).is_empty());
    // A second down has nothing left to do.
    let r = karpctl(&wd, &["down", "--cluster", &c, "--yes", "--output", "json"]);
    assert_eq!(r.code, 0, "{r:?}");
    assert_eq!(r.writes(), 0, "{}", r.stdout);
}

#[test]
fn out_of_band_removal_is_found_by_diff_and_restored_by_up() {
    let c = cluster_name("disc-drift");
    let s = Seeded::of(&c, &[]);
    let sdk = sdk();
    let wd = Workdir::new();
    wd.plan_for(&c, "");
    assert_eq!(karpctl(&wd, &["up", "--cluster", &c]).code, 0);

    // One subnet loses the discovery tag (the marker stays); another loses both.
    let (one, both) = (&s.private[0], &s.private[1]);
    delete_tag(&sdk, one, DISCOVERY, &c);
    delete_tag(&sdk, both, DISCOVERY, &c);
    delete_tag(&sdk, both, MARKER, &c);
    let t = tags_of(&sdk, one);
    assert!(!t.contains_key(DISCOVERY) && t.get(MARKER) == Some(&c), "{t:?}");
    assert_untagged(&sdk, both);

    let r = karpctl(&wd, &["diff", "--cluster", &c]);
    assert_eq!(r.code, 2, "{r:?}");
    assert!(r.stdout.contains(&format!("~ {}", node_id(one))), "{r:?}");
    assert!(r.stdout.contains(&format!("+ {}", node_id(both))), "{r:?}");
    assert!(r.stdout.contains("Plan: 1 to add, 1 to change, 0 to destroy."), "{r:?}");
    let r = karpctl(&wd, &["diff", "--cluster", &c, "--output", "json"]);
    assert_eq!(r.code, 2, "{r:?}");
    let doc = r.json();
    assert_eq!(doc["in_sync"], false, "{doc}");
    assert_eq!(step_action(&doc, &node_id(one)).as_deref(), Some("update"), "{doc}");
    assert_eq!(step_action(&doc, &node_id(both)).as_deref(), Some("create"), "{doc}");

    let r = karpctl(&wd, &["up", "--cluster", &c]);
    assert_eq!(r.code, 0, "{r:?}");
    assert_ours(&sdk, &c, one);
    assert_ours(&sdk, &c, both);
    let r = karpctl(&wd, &["diff", "--cluster", &c]);
    assert_eq!(r.code, 0, "restored: {r:?}");
}

#[test]
fn a_foreign_group_and_subnet_tagged_for_the_cluster_are_distinct_warnings() {
    let c = cluster_name("disc-foreign");
    let s = Seeded::of(&c, &[]);
    let sdk = sdk();
    let wd = Workdir::new();
    wd.plan_for(&c, "");
    assert_eq!(karpctl(&wd, &["up", "--cluster", &c]).code, 0);

    // By hand, after up: the unrelated group and a public subnet are tagged for the cluster.
    let foreign_subnet = s.public[0].clone();
    add_tags(&sdk, &s.unrelated_sg, &[(DISCOVERY, c.as_str())]);
    add_tags(&sdk, &foreign_subnet, &[(DISCOVERY, c.as_str())]);

    let r = karpctl(&wd, &["diff", "--cluster", &c, "--output", "json"]);
    assert_ne!(r.code, 1, "{r:?}");
    let doc = r.json();
    let f = plan_notes(&doc);
    for object in [&s.unrelated_sg, &foreign_subnet] {
        let mine: Vec<_> = f.iter().filter(|(_, _, m)| m.contains(object.as_str()) && m.contains(DISCOVERY)).collect();
        assert_eq!(mine.len(), 1, "exactly one finding names {object}: {f:?}");
        let (id, level, _) = mine[0];
        assert_eq!(level, "warning", "{object}: {f:?}");
        assert!(!id.contains("capacity"), "a distinct finding, not the capacity one: {f:?}");
        assert_eq!(step_action(&doc, &node_id(object)), None, "karpctl leaves {object} alone: {doc}");
    }
    // The group warning is its own finding: no other finding mentions the group.
    assert_eq!(f.iter().filter(|(_, _, m)| m.contains(s.unrelated_sg.as_str())).count(), 1, "{f:?}");

    let r = karpctl(&wd, &["diff", "--cluster", &c]);
    assert_ne!(r.code, 1, "{r:?}");
    let line = r.all().lines().find(|l| l.contains(s.unrelated_sg.as_str())).map(str::to_string);
    let line = line.unwrap_or_else(|| panic!("human diff names the foreign group: {r:?}"));
    assert!(line.to_lowercase().contains("warning"), "{line}");

    // Neither up nor down touches the hand-made tags.
    assert_eq!(karpctl(&wd, &["up", "--cluster", &c]).code, 0);
    assert_eq!(karpctl(&wd, &["down", "--cluster", &c, "--yes"]).code, 0);
    for object in [&s.unrelated_sg, &foreign_subnet] {
        let t = tags_of(&sdk, object);
        assert_eq!(t.get(DISCOVERY).map(String::as_str), Some(c.as_str()), "{object}: {t:?}");
        assert!(!t.contains_key(MARKER), "{object}: {t:?}");
    }
    assert_eq!(tagged_for(&sdk, &c), [s.unrelated_sg.clone(), foreign_subnet.clone()].into_iter().collect());
}

/// The per-AZ capacity lines of a run: for each subnet, the one finding that names its AZ and it.
fn check_capacity(doc: &Value, human: &str, picks: &BTreeMap<String, (String, i64)>, what: &str) {
    let f = plan_notes(doc);
    for (subnet, (az, free)) in picks {
        let about_az: Vec<_> =
            f.iter().filter(|(_, _, m)| m.contains(&format!("{az}:")) || m.contains(&format!("{az} "))).collect();
        let pick: Vec<_> = about_az.iter().filter(|(_, _, m)| m.contains(subnet.as_str())).collect();
        assert_eq!(pick.len(), 1, "{what}: one finding names {az}'s pick {subnet}: {f:?}");
        let (_, level, msg) = pick[0];
        assert!(msg.contains(&free.to_string()), "{what}: the free address count {free} is shown: {msg}");
        // Under 64 free is a warning; an ordinary /24 (251 free) is not.
        assert_eq!(*level == "warning", *free < 64, "{what}: {free} free addresses: {msg}");
        let line = human
            .lines()
            .find(|l| {
                l.contains(az.as_str())
                    && l.contains(subnet.as_str())
                    && l.contains(&free.to_string())
                    && !l.trim_start().starts_with('#')
            })
            .unwrap_or_else(|| panic!("{what}: the human output lists {az} -> {subnet} ({free} free):\n{human}"));
        assert_eq!(line.to_lowercase().contains("warning"), *free < 64, "{what}: {line}");
    }
}

#[test]
fn diff_and_up_list_per_az_the_subnet_karpenter_picks_and_its_free_addresses() {
    let c = cluster_name("disc-cap");
    let s = Seeded::of(&c, &[]);
    let sdk = sdk();
    let picks = subnet_facts(&sdk, &s.private);
    assert_eq!(picks.len(), 3, "{picks:?}");
    let azs: BTreeSet<&String> = picks.values().map(|(az, _)| az).collect();
    assert_eq!(azs.len(), 3, "one private subnet per AZ: {picks:?}");
    assert!(picks.values().all(|(_, free)| *free == 251), "the emulator reports 251 free addresses: {picks:?}");

    let wd = Workdir::new();
    wd.plan_for(&c, "");
    let j = karpctl(&wd, &["diff", "--cluster", &c, "--output", "json"]);
    assert_eq!(j.code, 2, "{j:?}");
    let h = karpctl(&wd, &["diff", "--cluster", &c]);
    assert_eq!(h.code, 2, "{h:?}");
    check_capacity(&j.json(), &h.all(), &picks, "diff");

    let h = karpctl(&wd, &["up", "--cluster", &c]);
    assert_eq!(h.code, 0, "{h:?}");
    let j = karpctl(&wd, &["up", "--cluster", &c, "--output", "json"]);
    assert_eq!(j.code, 0, "{j:?}");
    check_capacity(&j.json(), &h.all(), &picks, "up");

    // After switching to the public subnets, the picks follow them.
    wd.plan_for(&c, PUBLIC_FILTER);
    let picks = subnet_facts(&sdk, &s.public);
    let j = karpctl(&wd, &["diff", "--cluster", &c, "--output", "json"]);
    let h = karpctl(&wd, &["diff", "--cluster", &c]);
    assert_eq!(j.code, 2, "{j:?}");
    check_capacity(&j.json(), &h.all(), &picks, "diff after switching to public subnets");
}

#[test]
fn subnet_ids_from_another_vpc_fail_preflight_with_no_write() {
    let c = cluster_name("disc-ids");
    let other = cluster_name("disc-ids-other");
    let s = Seeded::of(&c, &[]);
    let o = Seeded::of(&other, &[]);
    assert_ne!(s.vpc, o.vpc);
    let sdk = sdk();
    let wd = Workdir::new();
    let foreign = o.private[0].clone();
    wd.plan_for(&c, &format!("[discovery]\nsubnet_ids = [\"{}\", \"{foreign}\"]\n", s.private[0]));

    for cmd in ["diff", "up"] {
        let r = karpctl(&wd, &[cmd, "--cluster", &c, "--output", "json"]);
        let msg = failed_without_writes(&r, cmd);
        assert!(msg.contains(&foreign), "{cmd}: names the subnet: {msg}");
        assert!(msg.contains("VPC"), "{cmd}: says it is about the VPC: {msg}");
        assert!(msg.contains(&o.vpc) || msg.contains(&s.vpc), "{cmd}: names a VPC: {msg}");
        assert!(!msg.contains(&s.private[0]), "{cmd}: the good subnet is not blamed: {msg}");
    }
    let r = karpctl(&wd, &["up", "--cluster", &c]);
    assert_eq!(r.code, 1, "{r:?}");
    assert!(r.stderr.contains(&foreign), "{r:?}");
    for id in s.all().iter().chain(o.all().iter()) {
        assert_untagged(&sdk, id);
    }
    assert!(tagged_for(&sdk, &c).is_empty());
}

#[test]
fn a_subnet_tag_filter_matching_nothing_in_the_vpc_fails_preflight_with_no_write() {
    let c = cluster_name("disc-nomatch");
    let other = cluster_name("disc-nomatch-other");
    let s = Seeded::of(&c, &[]);
    let o = Seeded::of(&other, &[]);
    let sdk = sdk();
    // A tag only a subnet of another VPC carries: the filter is within the cluster's VPC.
    let marker_key = "karpctl-test/only-elsewhere";
    add_tags(&sdk, &o.private[0], &[(marker_key, c.as_str())]);
    let wd = Workdir::new();

    let cases = [
        ("a value no subnet has", "kubernetes.io/role/elb", "nope".to_string()),
        ("a tag only another VPC's subnet has", marker_key, c.clone()),
    ];
    for (what, k, v) in &cases {
        wd.plan_for(&c, &format!("[discovery]\nsubnet_tags = {{ \"{k}\" = \"{v}\" }}\n"));
        for cmd in ["diff", "up"] {
            let r = karpctl(&wd, &[cmd, "--cluster", &c, "--output", "json"]);
            let msg = failed_without_writes(&r, &format!("{what}, {cmd}"));
            assert!(msg.contains(k), "{what}, {cmd}: names the filter: {msg}");
            assert!(msg.contains("subnet_tags"), "{what}, {cmd}: names the plan field: {msg}");
            assert!(msg.contains(&s.vpc), "{what}, {cmd}: names the cluster's VPC: {msg}");
        }
    }
    for id in s.all().iter().chain(o.all().iter()) {
        assert_untagged(&sdk, id);
    }
    assert!(tagged_for(&sdk, &c).is_empty());
}

#[test]
fn a_classic_load_balancer_group_of_the_cluster_is_never_taken_for_the_node_group() {
    // The Kubernetes AWS cloud provider makes one group per `type: LoadBalancer` Service and tags
    // it kubernetes.io/cluster/<c>=owned, like the node group.
    let c = cluster_name("disc-elb");
    let s = Seeded::of(&c, &[]);
    let sdk = sdk();
    let elb = rt().block_on(async {
        let o = sdk
            .ec2
            .create_security_group()
            .group_name("k8s-elb-a1b2c3d4e5f60718293a4b5c6d7e8f90")
            .description("Security group for Kubernetes ELB a1b2c3d4e5f60718293a4b5c6d7e8f90 (default/web)")
            .vpc_id(&s.vpc)
            .send()
            .await
            .unwrap();
        o.group_id().unwrap().to_string()
    });
    add_tags(&sdk, &elb, &[(&format!("kubernetes.io/cluster/{c}"), "owned")]);
    let wd = Workdir::new();
    wd.plan_for(&c, "");
    let r = karpctl(&wd, &["up", "--cluster", &c]);
    assert_eq!(r.code, 0, "the load balancer's group is not a second candidate: {r:?}");
    assert_ours(&sdk, &c, &s.node_sg);
    assert_untagged(&sdk, &elb);
}

/// The subnet ids a finding or check names, among `ids`.
fn named(text: &str, ids: &[String]) -> BTreeSet<String> {
    ids.iter().filter(|id| text.contains(id.as_str())).cloned().collect()
}

#[test]
fn public_subnets_someone_else_tagged_are_one_error_in_diff_up_and_doctor() {
    // terraform-aws-vpc: NAT private subnets, public ones without public IPs that its
    // `public_subnet_tags` tagged for Karpenter; nodes there never join.
    let c = cluster_name("disc-tfpub");
    let s = Seeded::of(&c, &["--no-public-ip"]);
    let sdk = sdk();
    for id in &s.public {
        add_tags(&sdk, id, &[(DISCOVERY, c.as_str())]);
    }
    let wd = Workdir::new();
    wd.plan_for(&c, "");
    let all = s.subnets();

    // An error-level check: diff exits 1, as up does on the same state.
    let r = karpctl(&wd, &["diff", "--cluster", &c, "--output", "json"]);
    assert_eq!((r.code, r.writes()), (1, 0), "{r:?}");
    let doc = r.json();
    let results = found(&doc);
    let check = first_with_code(&results, "subnet-no-way-out").unwrap_or_else(|| panic!("an error check: {doc}"));
    assert_eq!(check["severity"], "error", "{check}");
    let diff_names = named(check["message"].as_str().unwrap(), &all);
    assert_eq!(diff_names, set(&s.public), "{check}");
    let fix = check["fix"].as_str().unwrap();
    for id in &s.public {
        assert!(fix.contains(&format!("aws ec2 delete-tags --resources {id} --tags Key={DISCOVERY},Value={c}")), "{fix}");
    }
    assert!(fix.contains("public_subnet_tags"), "{fix}");
    // One verdict: no second, softer finding about the same subnets.
    for (_, _, m) in plan_notes(&doc) {
        assert!(!m.contains("also carries"), "{m}");
    }
    let r = karpctl(&wd, &["diff", "--cluster", &c]);
    assert!(r.stdout.contains("error subnet-no-way-out"), "{}", r.stdout);

    // up makes everything, then says Karpenter cannot work yet (exit 1); the tags stay.
    let r = karpctl(&wd, &["up", "--cluster", &c]);
    assert_eq!(r.code, 1, "{r:?}");
    assert!(r.stderr.contains("Karpenter cannot work here yet"), "{r:?}");
    assert_eq!(tagged_for(&sdk, &c), set(&s.private).into_iter().chain(set(&s.public)).chain([s.node_sg.clone()]).collect());

    // doctor judges the same facts the same way.
    let r = karpctl(&wd, &["doctor", "--cluster", &c, "--output", "json"]);
    let doc = r.json();
    let f = first_with_code(&findings(&doc), "subnet-no-way-out").cloned();
    let f = f.unwrap_or_else(|| panic!("doctor: {doc}"));
    assert_eq!(f["severity"], "error", "{f}");
    assert_eq!(named(f["message"].as_str().unwrap(), &all), diff_names, "{f}");

    // The fix: take the tags off where they were put; then both agree that all is well.
    for id in &s.public {
        delete_tag(&sdk, id, DISCOVERY, &c);
    }
    let r = karpctl(&wd, &["up", "--cluster", &c, "--output", "json"]);
    assert_eq!(r.code, 0, "{r:?}");
    let doc = r.json();
    assert!(checked(&doc).iter().any(|c| c == "subnet-no-way-out"), "{doc}");
    assert!(!Value::from(found(&doc)).to_string().contains("subnet-no-way-out"), "{doc}");
    let r = karpctl(&wd, &["doctor", "--cluster", &c, "--output", "json"]);
    assert!(!r.json()["findings"].to_string().contains("subnet-no-way-out"), "{}", r.stdout);
}

#[test]
fn an_ipv6_clusters_subnets_are_judged_by_their_ipv4_egress_in_doctor_too() {
    // Someone tagged the private subnets of an IPv6 cluster whose IPv4 way out is NAT64 (moto
    // keeps the routes; the lag proxy shows the cluster's IPv6 family and the subnets' DNS64).
    let c = cluster_name("disc-v6");
    let v = seed_strict(&c, &["--network", "nat64"]);
    let private: Vec<String> = v["private_subnets"].as_array().unwrap().iter().map(|s| s.as_str().unwrap().into()).collect();
    let (px, eps) = lag::ipv6_cluster(&c);
    let sdk = sdk_strict();
    for id in &private {
        add_tags(&sdk, id, &[(DISCOVERY, c.as_str())]);
    }
    let wd = Workdir::new();
    wd.plan_for(&c, "");
    let doctor = || {
        let r = karpctl_strict_at(&wd, &["doctor", "--cluster", &c, "--output", "json"], &eps, &[]);
        let doc = r.json();
        first_with_code(&findings(&doc), "subnet-no-way-out").cloned()
    };
    let f = doctor().expect("DNS64 off: NAT64 is no way out, and ::/0 carries IPv6 only");
    assert_eq!(f["severity"], "error", "{f}");
    let (msg, fix) = (f["message"].as_str().unwrap(), f["fix"].as_str().unwrap());
    assert_eq!(named(msg, &private), set(&private), "{f}");
    assert!(msg.contains("DNS64 is off") && msg.contains("carries IPv6 only"), "{msg}");
    for id in &private {
        assert!(fix.contains(&format!("aws ec2 modify-subnet-attribute --subnet-id {id} --enable-dns64")), "{id}: {fix}");
    }
    let dns64: serde_json::Map<String, Value> = private.iter().map(|id| (id.clone(), Value::Bool(true))).collect();
    px.set(serde_json::json!({"ec2_subnet_dns64": dns64}));
    assert_eq!(doctor(), None, "NAT64 with DNS64 on is a way out");
    let r = karpctl_strict_at(&wd, &["diff", "--cluster", &c, "--output", "json"], &eps, &[]);
    assert_eq!(r.code, 2, "{r:?}");
    assert!(!Value::from(found(&r)).to_string().contains("subnet-no-way-out"), "{}", r.stdout);
}
