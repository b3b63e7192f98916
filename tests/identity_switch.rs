//! Switching `identity.mode` without a gap (issue #41, item 1; docs/reference.md "Identity
//! switches"): IRSA -> Pod Identity and back, the controller role's trust read through the AWS
//! SDK after every `up`, CloudTrail records (the lag proxy's `cloudtrail_events`) as evidence.

use crate::common::lag::LagProxy;
use crate::common::*;
use aws_sdk_iam::error::ProvideErrorMetadata;
use serde_json::{Value, json};

const ANNOTATION: &str = "serviceAccount.annotations.\"eks.amazonaws.com/role-arn\"";
const RESTART: &str = "kubectl -n kube-system rollout restart deployment/karpenter";

fn plan(c: &str, mode: &str) -> String {
    plan_toml(c, &format!("\n[identity]\nmode = \"{mode}\"\n"))
}

/// The controller role's ARN and live trust policy, read through the SDK.
fn controller(sdk: &Sdk, c: &str) -> (String, Value) {
    let name = format!("KarpenterController-{c}");
    let r = rt().block_on(sdk.iam.get_role().role_name(&name).send());
    let r = r.unwrap_or_else(|e| panic!("GetRole {name}: {:?}", e.code()));
    let role = r.role().unwrap();
    (role.arn().to_string(), policy_json(role.assume_role_policy_document().unwrap()))
}

/// Which paths the trust lets in: (Pod Identity: EKS Auth's service principal with
/// sts:AssumeRole and sts:TagSession; IRSA: the cluster's OIDC provider with web identity).
fn paths(trust: &Value, provider: &str) -> (bool, bool) {
    let st = statements(trust);
    let allows = |s: &Value| s["Effect"].as_str().is_some_and(|e| e.eq_ignore_ascii_case("allow"));
    let pod = st.iter().any(|s| {
        allows(s)
            && strings(&s["Principal"]["Service"]) == ["pods.eks.amazonaws.com"]
            && strings(&s["Action"]) == ["sts:AssumeRole", "sts:TagSession"]
    });
    let irsa = st.iter().any(|s| {
        allows(s)
            && strings(&s["Principal"]["Federated"]) == [provider.to_string()]
            && strings(&s["Action"]) == ["sts:AssumeRoleWithWebIdentity"]
    });
    (pod, irsa)
}

/// A call of the controller role recorded `minutes_ago`: through Pod Identity (EKS Auth's
/// session), or through IRSA (a web identity session of `provider`).
fn call(role: &str, minutes_ago: f64, irsa: Option<&str>) -> Value {
    let mut c = json!({"role": role, "event": "DescribeInstances", "source": "ec2.amazonaws.com",
                       "agent": "karpenter.sh-1.14.0", "minutes_ago": minutes_ago});
    if let Some(p) = irsa {
        c["web_identity"] = json!(p);
    }
    c
}

fn records(px: &LagProxy, records: Vec<Value>) {
    px.set(json!({"cloudtrail_events": records, "cloudtrail_lookup_rps": 1000}));
}

#[test]
fn irsa_to_pod_identity_and_back_keeps_the_path_the_controller_uses_until_it_is_seen_or_told() {
    let c = cluster_name("idswitch");
    seed(&c, &[]);
    let sdk = sdk();
    let (_, provider) = create_oidc_provider(&sdk, &c);
    let wd = Workdir::new();
    let px = LagProxy::start(&c, &endpoint());
    let run = |args: &[&str]| karpctl_at(&wd, px.url(), args, &[]);
    records(&px, vec![]);

    // IRSA, and a controller that runs with it.
    wd.plan(&c, &plan(&c, "irsa"));
    let r = run(&["up", "--cluster", &c]);
    assert_eq!(r.code, 0, "{r:?}");
    let (role, trust) = controller(&sdk, &c);
    assert_eq!(paths(&trust, &provider), (false, true), "{trust}");
    records(&px, vec![call(&role, 10.0, Some(&provider)), call(&role, 5.0, Some(&provider))]);

    // To Pod Identity: the association is made and the trust keeps IRSA beside Pod Identity.
    wd.plan(&c, &plan(&c, "pod_identity"));
    let r = run(&["up", "--cluster", &c, "--output", "json"]);
    assert_eq!(r.code, 0, "{r:?}");
    let (_, trust) = controller(&sdk, &c);
    assert_eq!(paths(&trust, &provider), (true, true), "IRSA kept beside Pod Identity: {trust}");
    assert_eq!(karpenter_associations(&sdk, &c).len(), 1, "the association is made in the same run");
    let sw = &r.json()["identity_switch"];
    assert_eq!(
        (sw["from"].as_str(), sw["to"].as_str(), sw["stage"].as_str()),
        (Some("irsa"), Some("pod_identity"), Some("start"))
    );
    assert_eq!(sw["helm"], json!({"key": ANNOTATION, "value": null}), "the annotation is removed");
    assert_eq!(sw["restart"], RESTART);
    assert!(sw["remaining"].as_str().unwrap().contains("--finish-identity-switch"), "{sw}");

    // Nothing shows the controller on Pod Identity yet: both stay, `diff` says what remains.
    let r = run(&["diff", "--cluster", &c]);
    assert_eq!(r.code, 0, "nothing to apply now: {r:?}");
    for want in [
        "Identity switch irsa -> pod_identity: both paths are in place; the old one stays",
        "no call of the controller role through Pod Identity",
        &format!("1. Helm: remove {ANNOTATION} from Karpenter's Helm values"),
        &format!("2. restart the controller: {RESTART}"),
        "then: the IRSA statement leaves controller-role's trust policy once CloudTrail shows",
    ] {
        assert!(r.stdout.contains(want), "{want}:\n{}", r.stdout);
    }
    let r = run(&["diff", "--cluster", &c, "--output", "markdown"]);
    assert!(
        r.stdout.contains("**Identity switch irsa -> pod_identity: both paths are in place; the old one stays**"),
        "{}",
        r.stdout
    );
    assert!(r.stdout.contains(&format!("  2. restart the controller: {RESTART}")), "{}", r.stdout);
    let r = run(&["up", "--cluster", &c]);
    assert_eq!(r.code, 0, "{r:?}");
    assert_eq!(paths(&controller(&sdk, &c).1, &provider), (true, true), "kept without evidence or the flag");

    // After the restart CloudTrail shows Pod Identity sessions only: the IRSA statement goes.
    records(
        &px,
        vec![
            call(&role, 10.0, Some(&provider)),
            call(&role, 5.0, Some(&provider)),
            call(&role, 2.0, None),
            call(&role, 1.0, None),
        ],
    );
    let r = run(&["diff", "--cluster", &c, "--output", "json"]);
    assert_eq!(r.code, 2, "{r:?}");
    assert_eq!(steps(&r).get("controller-role").map(String::as_str), Some("update"), "{}", r.stdout);
    let sw = &r.json()["identity_switch"];
    assert_eq!(sw["stage"], "finish");
    assert!(sw["reason"].as_str().unwrap().contains("calling through Pod Identity (2 call(s)"), "{sw}");
    let r = run(&["up", "--cluster", &c]);
    assert_eq!(r.code, 0, "{r:?}");
    assert!(r.stdout.contains("Identity switch irsa -> pod_identity: finished, the old path is removed"), "{}", r.stdout);
    assert_eq!(paths(&controller(&sdk, &c).1, &provider), (true, false), "Pod Identity only");
    assert_eq!(karpenter_associations(&sdk, &c).len(), 1);

    // And back to IRSA; the flag before IRSA is in place removes nothing.
    wd.plan(&c, &plan(&c, "irsa"));
    let r = run(&["up", "--cluster", &c, "--finish-identity-switch", "--output", "json"]);
    assert_eq!(r.code, 0, "{r:?}");
    assert_eq!(paths(&controller(&sdk, &c).1, &provider), (true, true), "Pod Identity kept beside IRSA");
    assert_eq!(karpenter_associations(&sdk, &c).len(), 1, "the association is kept");
    let sw = &r.json()["identity_switch"];
    assert_eq!(
        (sw["from"].as_str(), sw["to"].as_str(), sw["stage"].as_str()),
        (Some("pod_identity"), Some("irsa"), Some("start"))
    );
    assert_eq!(sw["helm"], json!({"key": ANNOTATION, "value": role}), "the annotation is added with the role's ARN");
    assert!(sw["reason"].as_str().unwrap().contains("--finish-identity-switch takes effect only once"), "{sw}");
    let r = run(&["up", "--cluster", &c]);
    assert_eq!(r.code, 0, "{r:?}");
    assert!(r.stdout.contains(&format!("1. Helm: set {ANNOTATION} = {role}")), "{}", r.stdout);
    assert!(r.stdout.contains(RESTART), "{}", r.stdout);

    // A pod still on Pod Identity after the first IRSA call: no evidence, both stay.
    records(
        &px,
        vec![
            call(&role, 2.0, None),
            call(&role, 1.0, Some(&provider)),
            call(&role, 0.7, None),
            call(&role, 0.5, Some(&provider)),
        ],
    );
    let r = run(&["diff", "--cluster", &c, "--output", "json"]);
    assert_eq!(r.code, 0, "{r:?}");
    assert!(
        r.json()["identity_switch"]["reason"].as_str().unwrap().contains("but also through Pod Identity after that"),
        "{}",
        r.stdout
    );
    let r = run(&["up", "--cluster", &c]);
    assert_eq!(r.code, 0, "{r:?}");
    assert_eq!(paths(&controller(&sdk, &c).1, &provider), (true, true));
    assert_eq!(karpenter_associations(&sdk, &c).len(), 1);

    // The user says the controller is on IRSA: the Pod Identity statement and association go.
    let r = run(&["up", "--cluster", &c, "--finish-identity-switch", "--output", "json"]);
    assert_eq!(r.code, 0, "{r:?}");
    assert_eq!(r.json()["identity_switch"]["stage"], "finish", "{}", r.stdout);
    assert_eq!(paths(&controller(&sdk, &c).1, &provider), (false, true), "IRSA only");
    assert!(karpenter_associations(&sdk, &c).is_empty(), "the association is deleted");
    let r = run(&["diff", "--cluster", &c, "--output", "json"]);
    assert_eq!(r.code, 0, "{r:?}");
    assert!(r.json().get("identity_switch").is_none(), "no switch left: {}", r.stdout);
}
