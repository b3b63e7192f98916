//! The steps that let the tool which made a setup let go of it: Terraform's `removed` blocks and
//! what they leave behind, CloudFormation's stacks with Retain checked first (pure).

use super::found::{Found, FoundRole, Policies, Tool, tf_generated};
use crate::report::{HandAddedPolicy, LetGo, ModuleOutput, Stack, TerraformSteps};
use crate::spec::IdentityMode;

/// Pure: how to let go of the objects in the tool that made them. Terraform forgets the whole
/// module (never a hand-picked list: that misses what the module made for the user's settings,
/// and Terraform destroys what stays in state). CloudFormation: the guide's stack, and eksctl's
/// stack of the controller role (`<c>-karpenter`) when that role is the one found.
pub fn let_go(f: &Found, module: &str) -> LetGo {
    match f.tool() {
        Tool::Terraform => LetGo::Terraform { module: module_address(module), steps: TerraformSteps::default() },
        Tool::CloudFormation { stack } => {
            let mut stacks = vec![Stack { name: stack, parameters: vec!["ClusterName".into()] }];
            // eksctl makes the getting-started guide's controller role `<cluster>-karpenter` in a
            // stack of its own, with no parameters: Pod Identity and IRSA name it differently.
            if f.controller.as_ref().is_some_and(|r| r.name == format!("{}-karpenter", f.cluster)) {
                let kind = match f.mode {
                    Some(IdentityMode::Irsa) => "addon-iamserviceaccount",
                    _ => "podidentityrole",
                };
                stacks.push(Stack {
                    name: format!("eksctl-{}-{kind}-{}-{}", f.cluster, f.namespace, f.service_account),
                    parameters: vec![],
                });
            }
            LetGo::CloudFormation { stacks }
        }
        Tool::Unknown => LetGo::Unknown,
    }
}

/// Pure: what changes in the Terraform configuration before the module block goes. Every output
/// the terraform-aws-eks `karpenter` module (v20, v21) exposes, with the value `karpctl output
/// --format json` gives for it once `up --adopt` manages the objects (read from the plan as
/// written, `spec`, and what was found: the objects are adopted in place), and the controller
/// role's policies the module did not make, retired or kept.
pub fn terraform_steps(f: &Found, pol: &Policies, spec: Option<&crate::spec::Spec>) -> TerraformSteps {
    let partition = f.cluster_arn.split(':').nth(1).unwrap_or("aws");
    let controller = f.controller.as_ref();
    let node = f.node_role.as_ref();
    let queue = match spec {
        Some(s) => s.interruption.enabled.then(|| s.interruption.queue_name.clone()),
        None => f.queue.clone(),
    };
    let profile = spec.and_then(|s| s.identity.instance_profile.as_ref()).map(|n| n.name.clone());
    let (ns, sa) = match spec {
        Some(s) => (s.identity.namespace.clone(), s.identity.service_account.clone()),
        None => (f.namespace.clone(), f.service_account.clone()),
    };
    let out = |name, value: Option<String>, key: &str| ModuleOutput { name, value, source: format!(".{key}") };
    let none = |name, how: String| ModuleOutput { name, value: None, source: how };
    let role_id = |r: Option<&FoundRole>| {
        format!(
            "karpctl output gives none: aws iam get-role --role-name {} --query Role.RoleId --output text",
            r.map(|r| r.name.as_str()).unwrap_or("<role>")
        )
    };
    let node_arn = node.map(|r| r.arn.clone());
    let outputs = vec![
        out("iam_role_name", controller.map(|r| r.name.clone()), "controller_role_name"),
        out("iam_role_arn", controller.map(|r| r.arn.clone()), "controller_role_arn"),
        none("iam_role_unique_id", role_id(controller)),
        out(
            "queue_arn",
            queue.as_ref().map(|q| format!("arn:{partition}:sqs:{}:{}:{q}", f.region, f.account_id)),
            "interruption_queue_arn",
        ),
        out("queue_name", queue.clone(), "interruption_queue"),
        none(
            "queue_url",
            format!(
                "karpctl output gives none: aws sqs get-queue-url --queue-name {} --query QueueUrl --output text",
                queue.as_deref().unwrap_or("<queue>")
            ),
        ),
        none("event_rules", "karpctl output gives none: the rules keep their names (interruption.rule_names in the plan)".into()),
        out("node_iam_role_name", node.map(|r| r.name.clone()), "node_role_name"),
        out("node_iam_role_arn", node_arn.clone(), "node_role_arn"),
        none("node_iam_role_unique_id", role_id(node)),
        none(
            "node_access_entry_arn",
            format!(
                "karpctl output gives none: aws eks describe-access-entry --cluster-name {} --principal-arn {} --query accessEntry.accessEntryArn --output text",
                f.cluster,
                node_arn.as_deref().unwrap_or("<node role ARN>")
            ),
        ),
        none(
            "instance_profile_arn",
            match &profile {
                Some(p) => format!(
                    "karpctl output gives none: aws iam get-instance-profile --instance-profile-name {p} --query InstanceProfile.Arn --output text"
                ),
                None => "none: the nodes use the role (Karpenter makes their instance profiles)".to_string(),
            },
        ),
        out("instance_profile_id", profile.clone(), "instance_profile"),
        out("instance_profile_name", profile.clone(), "instance_profile"),
        none(
            "instance_profile_unique",
            match &profile {
                Some(p) => format!(
                    "karpctl output gives none: aws iam get-instance-profile --instance-profile-name {p} --query InstanceProfile.InstanceProfileId --output text"
                ),
                None => "none: the nodes use the role (Karpenter makes their instance profiles)".to_string(),
            },
        ),
        out("namespace", Some(ns), "service_account.namespace"),
        out("service_account", Some(sa), "service_account.name"),
    ];
    // The module's own controller policy is forgotten with the module; the rest was declared
    // next to it.
    let modules = |id: &String| tf_generated(id.rsplit('/').next().unwrap_or(id), "KarpenterController-");
    let mut policies: Vec<HandAddedPolicy> =
        pol.retire.iter().filter(|id| !modules(id)).map(|id| HandAddedPolicy { id: id.clone(), retired: true }).collect();
    policies.extend(
        pol.keep
            .iter()
            .chain(&pol.keep_inline)
            .chain(&pol.pre_v1)
            .filter(|id| !modules(id))
            .map(|id| HandAddedPolicy { id: id.clone(), retired: false }),
    );
    TerraformSteps { outputs, policies }
}

/// `--terraform-module` as a module address: `karpenter` and `module.karpenter` alike.
pub(super) fn module_address(m: &str) -> String {
    let m = m.trim();
    if m.starts_with("module.") { m.to_string() } else { format!("module.{m}") }
}

#[cfg(test)]
mod tests {
    use super::super::fixtures::{TS, doc, tf};
    use super::super::found::{FoundPolicy, FoundRole, Tool, sort_policies};
    use super::*;
    use serde_json::json;

    #[test]
    fn terraform_let_go_forgets_the_whole_module() {
        let f = tf();
        let none = TerraformSteps::default();
        assert_eq!(let_go(&f, "module.karpenter"), LetGo::Terraform { module: "module.karpenter".into(), steps: none.clone() });
        assert_eq!(let_go(&f, "karpenter_prod"), LetGo::Terraform { module: "module.karpenter_prod".into(), steps: none });
        let text = crate::report::import::let_go_text(&let_go(&f, "module.karpenter"));
        assert!(text.lines().any(|l| l.trim() == "terraform state rm 'module.karpenter'"), "its own line: {text}");
        let rm = text.find("terraform state rm").unwrap();
        let removed = text.find("removed {").unwrap();
        let zero = text.find("`terraform plan` must show 0 to destroy before you apply").unwrap();
        assert!(rm < removed && removed < zero, "{text}");
        assert!(!text.contains("aws_iam_role"), "no hand-picked addresses: {text}");
    }

    /// Every `module.<m>.<output>` and `local.<name>` an HCL body reads, and the locals it
    /// declares: what `terraform validate` resolves.
    fn hcl_references(text: &str) -> (Vec<String>, Vec<String>, Vec<String>) {
        use hcl_edit::expr::{Expression, TraversalOperator};
        use hcl_edit::visit::{Visit, visit_block, visit_traversal};
        #[derive(Default)]
        struct Refs {
            modules: Vec<String>,
            locals: Vec<String>,
            declared: Vec<String>,
        }
        impl Visit for Refs {
            fn visit_block(&mut self, node: &hcl_edit::structure::Block) {
                if node.ident.as_str() == "locals" {
                    self.declared.extend(node.body.attributes().map(|a| a.key.as_str().to_string()));
                }
                if node.ident.as_str() == "module" {
                    self.declared.extend(node.labels.iter().map(|l| format!("module.{}", l.as_str())));
                }
                visit_block(self, node)
            }
            fn visit_traversal(&mut self, node: &hcl_edit::expr::Traversal) {
                let attrs: Vec<&str> = node
                    .operators
                    .iter()
                    .map_while(|o| match o.value() {
                        TraversalOperator::GetAttr(i) => Some(i.as_str()),
                        _ => None,
                    })
                    .collect();
                if let Expression::Variable(root) = &node.expr {
                    match (root.as_str(), attrs.as_slice()) {
                        ("module", [m, output, ..]) => self.modules.push(format!("module.{m}.{output}")),
                        ("local", [name, ..]) => self.locals.push(name.to_string()),
                        _ => {}
                    }
                }
                visit_traversal(self, node)
            }
        }
        let body = hcl_edit::parser::parse_body(text).unwrap_or_else(|e| panic!("not HCL: {e}\n{text}"));
        let mut r = Refs::default();
        r.visit_body(&body);
        (r.modules, r.locals, r.declared)
    }

    /// The module's example, as `terraform validate` would judge it: references to modules that
    /// are not declared, and locals that are not.
    fn undeclared(text: &str) -> Vec<String> {
        let (modules, locals, declared) = hcl_references(text);
        let mut out: Vec<String> = modules
            .into_iter()
            .filter(|m| !declared.iter().any(|d| m.starts_with(&format!("{d}."))))
            .chain(locals.into_iter().filter(|l| !declared.contains(l)).map(|l| format!("local.{l}")))
            .collect();
        out.sort();
        out.dedup();
        out
    }

    /// Drop the top-level block whose header line starts with `header` (to its closing `}`).
    fn drop_block(text: &str, header: &str) -> String {
        let start = text.find(header).unwrap_or_else(|| panic!("no {header}"));
        let end = start + text[start..].find("\n}\n").unwrap() + 3;
        format!("{}{}", &text[..start], &text[end..])
    }

    /// The let-go steps on the module's own example: every output it exposes named with the
    /// value `karpctl output --format json` gives; the locals parse as HCL; done as they say
    /// (locals added, references replaced, the retired policy's resource and the block deleted),
    /// the example has no undeclared reference left, while deleting only the block leaves some.
    #[test]
    fn the_terraform_steps_make_the_modules_example_valid_without_the_module() {
        let example = include_str!("../../tests/fixtures/terraform/karpenter-example.tf");
        assert!(undeclared(example).is_empty(), "the fixture is valid as it is: {:?}", undeclared(example));
        let without = drop_block(example, "module \"karpenter\" {");
        assert_eq!(
            undeclared(&without),
            [
                "module.karpenter.iam_role_name",
                "module.karpenter.namespace",
                "module.karpenter.node_iam_role_name",
                "module.karpenter.queue_name"
            ],
            "the oracle sees what validate refuses"
        );

        let mut f = tf();
        f.controller_policies.push(FoundPolicy {
            id: "KarpenterInstanceProfileGarbageCollection".into(),
            document: doc(json!([{"Effect": "Allow", "Action": "iam:ListInstanceProfiles", "Resource": "*"}])),
        });
        let pol = sort_policies(&f, &[]);
        assert!(pol.retire.contains(&"KarpenterInstanceProfileGarbageCollection".to_string()), "{:?}", pol.retire);
        let steps = terraform_steps(&f, &pol, None);
        let module = "module.karpenter";
        let text = crate::report::import::let_go_text(&LetGo::Terraform { module: module.into(), steps: steps.clone() });

        // Every output of the module (v21's outputs.tf), each with its value or why there is none.
        let names: Vec<&str> = steps.outputs.iter().map(|o| o.name).collect();
        assert_eq!(
            names,
            [
                "iam_role_name",
                "iam_role_arn",
                "iam_role_unique_id",
                "queue_arn",
                "queue_name",
                "queue_url",
                "event_rules",
                "node_iam_role_name",
                "node_iam_role_arn",
                "node_iam_role_unique_id",
                "node_access_entry_arn",
                "instance_profile_arn",
                "instance_profile_id",
                "instance_profile_name",
                "instance_profile_unique",
                "namespace",
                "service_account",
            ]
        );
        let c = "say-when-east";
        for (local, value, key) in [
            ("karpenter_queue_name", format!("\"Karpenter-{c}\""), ".interruption_queue"),
            ("karpenter_queue_arn", format!("\"arn:aws:sqs:us-east-1:123456789012:Karpenter-{c}\""), ".interruption_queue_arn"),
            ("karpenter_iam_role_name", format!("\"KarpenterController-{TS}\""), ".controller_role_name"),
            ("karpenter_node_iam_role_name", format!("\"{c}\""), ".node_role_name"),
            ("karpenter_namespace", "\"kube-system\"".to_string(), ".service_account.namespace"),
            ("karpenter_instance_profile_name", "null".to_string(), ".instance_profile"),
        ] {
            let line = text
                .lines()
                .find(|l| l.trim_start().starts_with(&format!("{local} ")))
                .unwrap_or_else(|| panic!("{local}: {text}"));
            assert!(line.contains(&format!("= {value} # {key}")), "{line}");
        }
        // The order a user follows: locals and policies, then state rm, then the block.
        let (locals_at, rm_at, block_at) = (
            text.find("  locals {").unwrap(),
            text.find("terraform state rm 'module.karpenter'").unwrap(),
            text.find("then delete the").unwrap(),
        );
        assert!(locals_at < rm_at && rm_at < block_at, "{text}");
        assert!(text.contains("KarpenterInstanceProfileGarbageCollection (inline): karpctl's policies replace it"), "{text}");
        assert!(text.contains("arn:aws:iam::123456789012:policy/ebs-kms (managed): kept; keep its resource, with `role = local.karpenter_iam_role_name`"), "{text}");
        assert!(
            !text.contains(&format!("policy/KarpenterController-{TS} (")),
            "the module's own policy goes with the module: {text}"
        );

        // The printed HCL parses: the locals block and the `removed` block.
        let block = |start: &str| {
            let from = text.find(start).unwrap();
            let to = from + text[from..].find("\n  }\n").unwrap() + 4;
            text[from..to].lines().map(|l| l.strip_prefix("  ").unwrap_or(l)).collect::<Vec<_>>().join("\n")
        };
        let locals = block("  locals {");
        let removed = block("  removed {");
        hcl_edit::parser::parse_body(&removed).unwrap_or_else(|e| panic!("{e}: {removed}"));
        let (_, _, declared) = hcl_references(&locals);
        assert_eq!(declared.len(), 17, "{locals}");

        // Done as the text says, nothing is left undeclared.
        let mut done = drop_block(&without, "resource \"aws_iam_role_policy\" \"karpenter_instance_profile_gc\" {");
        done = done.replace("module.karpenter.", "local.karpenter_");
        done.push_str(&locals);
        assert!(undeclared(&done).is_empty(), "{:?}\n{done}", undeclared(&done));
        assert!(!done.contains("module.karpenter"), "{done}");
    }

    #[test]
    fn a_cloudformation_setup_is_told_by_its_rule_names() {
        let c = "say-when-east";
        let mut f = tf();
        f.controller = Some(FoundRole::of_arn(&format!("arn:aws:iam::123456789012:role/{c}-karpenter")));
        f.node_role = Some(FoundRole::of_arn(&format!("arn:aws:iam::123456789012:role/KarpenterNodeRole-{c}")));
        f.queue = Some(c.into());
        f.rules = [("SpotInterrupt".to_string(), format!("Karpenter-{c}-SpotInterruptionRule-AbC123"))].into_iter().collect();
        assert_eq!(f.tool(), Tool::CloudFormation { stack: format!("Karpenter-{c}") });
        let mut cut = f.clone();
        cut.rules.insert("SpotInterrupt".into(), "Karpenter-say-whe-SpotInterruptionRule-AbC123".into());
        assert_eq!(cut.tool(), Tool::CloudFormation { stack: format!("Karpenter-{c}") }, "a cut stack name is made whole");
        let LetGo::CloudFormation { stacks } = let_go(&f, "module.karpenter") else { panic!() };
        assert_eq!(
            stacks,
            [
                Stack { name: format!("Karpenter-{c}"), parameters: vec!["ClusterName".into()] },
                Stack { name: format!("eksctl-{c}-podidentityrole-kube-system-karpenter"), parameters: vec![] },
            ]
        );
        f.mode = Some(IdentityMode::Irsa);
        let LetGo::CloudFormation { stacks } = let_go(&f, "module.karpenter") else { panic!() };
        assert_eq!(stacks[1].name, format!("eksctl-{c}-addon-iamserviceaccount-kube-system-karpenter"));
    }

    #[test]
    fn cloudformation_steps_are_chained_and_check_retain_before_delete() {
        let l = LetGo::CloudFormation {
            stacks: vec![
                Stack { name: "Karpenter-c1".into(), parameters: vec!["ClusterName".into()] },
                Stack { name: "eksctl-c1-podidentityrole-kube-system-karpenter".into(), parameters: vec![] },
            ],
        };
        let text = crate::report::import::let_go_text(&l);
        assert!(text.contains("--query TemplateBody --output json"), "{text}");
        assert!(text.contains("\n  retained='def ind:"), "the check is defined once, before the blocks: {text}");
        assert!(!text.contains("--output text >"), "text output mangles JSON templates: {text}");
        let blocks: Vec<&str> = text.split("\n  s=").skip(1).collect();
        assert_eq!(blocks.len(), 2, "{text}");
        for b in &blocks {
            let chain = &b[b.find("aws cloudformation update-stack").unwrap()..];
            let chain = &chain[..chain.find("stack-delete-complete").unwrap()];
            // Every step after update-stack is chained, and the Retain check comes before delete-stack.
            let and_steps: Vec<&str> = chain.split("&& ").skip(1).collect();
            assert_eq!(and_steps.len(), 4, "update && wait && check && delete && wait: {b}");
            assert!(
                and_steps[1].starts_with("aws cloudformation get-template") && and_steps[1].contains("jq -e \"$retained\""),
                "{b}"
            );
            assert!(and_steps[2].starts_with("aws cloudformation delete-stack"), "{b}");
        }
        assert!(blocks[0].contains("ParameterKey=ClusterName,UsePreviousValue=true"), "{}", blocks[0]);
        assert!(!blocks[1].contains("--parameters"), "eksctl's role stack has no parameters: {}", blocks[1]);
    }
}
