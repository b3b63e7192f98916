//! `karpctl import`'s report: what it found, the plan file it wrote, what `up --adopt` will then
//! change, and how to let go of the objects in the tool that made them (human text and JSON).

use super::PlanReport;
use super::style::Style;
use crate::aws::StatsReport;
use serde_json::{Value, json};
use std::path::PathBuf;

/// How to let go of the objects in the tool that made them.
#[derive(Clone, Debug, PartialEq)]
pub enum LetGo {
    /// `terraform state rm` of the whole module (or the `removed` block): a hand-picked list of
    /// addresses misses what the module made for the user's settings, and Terraform destroys
    /// whatever stays in state once the module block is deleted.
    Terraform {
        module: String,
        /// What must change in the configuration before the block can go.
        steps: TerraformSteps,
    },
    /// Give every resource of each stack `DeletionPolicy: Retain`, then delete the stack.
    CloudFormation {
        stacks: Vec<Stack>,
    },
    Unknown,
}

/// Before the module block can go: the module's outputs the configuration may still read (the
/// module's own example feeds `module.karpenter.queue_name` to its `helm_release`), each with the
/// value `karpctl output --format json` gives for it, and where the policies added to the
/// controller role outside the module go.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct TerraformSteps {
    pub outputs: Vec<ModuleOutput>,
    pub policies: Vec<HandAddedPolicy>,
}

/// One output of the terraform-aws-eks `karpenter` module.
#[derive(Clone, Debug, PartialEq)]
pub struct ModuleOutput {
    /// The output's name (`queue_name`).
    pub name: &'static str,
    /// Its value once karpctl manages the objects (None: karpctl output has no value for it).
    pub value: Option<String>,
    /// Where the value comes from: the `karpctl output --format json` key (`.interruption_queue`),
    /// or how to read it when karpctl gives none.
    pub source: String,
}

/// A policy on the controller role that the module did not make (a user's `aws_iam_role_policy`
/// or attachment next to the module block).
#[derive(Clone, Debug, PartialEq)]
pub struct HandAddedPolicy {
    /// A managed policy's ARN or an inline policy's name.
    pub id: String,
    /// karpctl's policies replace it and `up --adopt` takes it off the role.
    pub retired: bool,
}

/// A CloudFormation stack to let go of, with the parameters it really has (eksctl's role stacks
/// have none; the getting-started stack has `ClusterName`).
#[derive(Clone, Debug, PartialEq)]
pub struct Stack {
    pub name: String,
    pub parameters: Vec<String>,
}

#[derive(Debug)]
pub struct ImportReport {
    pub cluster: String,
    pub path: PathBuf,
    /// The plan file as written.
    pub text: String,
    /// What import could not tell or left alone.
    pub notes: Vec<String>,
    /// (piece, what was found).
    pub found_lines: Vec<(String, String)>,
    /// The read-only `diff --adopt` with the written plan, or why it was refused (the error and
    /// its hint, as text).
    pub diff: Result<PlanReport, String>,
    pub let_go: LetGo,
    pub stats: StatsReport,
}

/// Single quotes for a POSIX shell (addresses carry `"` and `[`).
fn sh(s: &str) -> String {
    format!("'{}'", s.replace('\'', r"'\''"))
}

/// The let-go steps, as lines of text. Nothing printed here can delete an object: Terraform
/// forgets the whole module, and `delete-stack` runs only after the stored template was checked
/// to retain every resource (docs/import.md).
pub fn let_go_text(l: &LetGo) -> String {
    let mut t = String::new();
    match l {
        LetGo::Terraform { module, steps } => {
            t.push_str(
                "Let go of them in Terraform first (no AWS change), so that it neither fights karpctl nor destroys them.\n",
            );
            t.push_str(&terraform_before(module, steps));
            t.push_str(&format!("\nThen forget the module (no AWS change):\n\n  terraform state rm {}\n", sh(module)));
            t.push_str(&format!(
                "\nthen delete the `{m}` block from your configuration (else the next apply makes them again).\n\
                 Or, with Terraform 1.7 or later, instead of state rm: delete the block and add\n\n\
                 \x20 removed {{\n    from = {m}\n    lifecycle {{\n      destroy = false\n    }}\n  }}\n\n\
                 Either way, `terraform validate` must pass and `terraform plan` must show 0 to destroy before you apply.\n",
                m = module
            ));
        }
        LetGo::CloudFormation { stacks } => {
            t.push_str(
                "Let go of them in CloudFormation first: give every resource of each stack `DeletionPolicy: Retain`,\n\
                 then delete the stack (its resources stay). Needs jq. First define the check, in the shell that\n\
                 runs the blocks below: it reads a stack's stored template and answers true only when every\n\
                 resource under Resources has `DeletionPolicy: Retain` (a JSON template as JSON; a YAML one line by\n\
                 line, in the block style CloudFormation's examples use: a resource it cannot read that way, in\n\
                 flow style or through an anchor, counts as not retained; write it in block style).\n\n",
            );
            for l in RETAINED_CHECK.lines() {
                t.push_str(&format!("  {l}\n"));
            }
            t.push_str(
                "\nEach block below is one command chained with `&&`: a failed step stops it, so a failed update\n\
                 never reaches delete-stack, and delete-stack runs only once the check answers true.\n",
            );
            for s in stacks {
                t.push_str(&cfn_steps(s));
            }
            t.push_str(
                "\n(If update-stack says \"No updates are to be performed\", the template already retains: run the\n\
                 chain from `aws cloudformation get-template`. `delete-stack --retain-resources` works only on a\n\
                 stack that already failed to delete. Do not run `eksctl delete podidentityassociation` or\n\
                 `eksctl delete iamserviceaccount`: they delete the role.)\n",
            );
        }
        LetGo::Unknown => t.push_str(
            "These objects were not made by the Terraform module or the CloudFormation stack (by their names): remove\n\
             them from whatever manages them without deleting them, so that it does not undo karpctl's changes.\n",
        ),
    }
    t
}

/// The local value that stands for a module output (`local.karpenter_queue_name`).
pub fn local_name(module: &str, output: &str) -> String {
    format!("{}_{output}", module.trim_start_matches("module."))
}

/// What must change before the module block goes: the outputs as `locals` (HCL) with the
/// references to replace, then the hand-added policies.
fn terraform_before(module: &str, steps: &TerraformSteps) -> String {
    let mut t = String::new();
    if !steps.outputs.is_empty() {
        t.push_str(&format!(
            "\nFirst, wherever your configuration reads `{module}.<output>` (the module's own example feeds\n\
             `{module}.queue_name` to its helm_release; `grep -rn '{module}\\.' --include='*.tf' .` lists them),\n\
             add these locals and replace each `{module}.<output>` with `local.{}<output>`: once the block is\n\
             gone, a reference to it fails `terraform validate` (\"Reference to undeclared module\"). The values\n\
             are what `karpctl output --format json` gives after `up --adopt` (the key after each; null: it\n\
             gives none, read it as the comment says):\n\n",
            local_name(module, "")
        ));
        t.push_str(&terraform_locals(module, &steps.outputs));
    }
    if !steps.policies.is_empty() {
        let role = local_name(module, "iam_role_name");
        t.push_str(&format!(
            "\nThe controller role's policies that the module did not make (declared next to it, such as an\n\
             `aws_iam_role_policy` with `role = {module}.iam_role_name`; `grep -rn` their names to find them):\n"
        ));
        for p in &steps.policies {
            let kind = if p.id.starts_with("arn:") { "managed" } else { "inline" };
            if p.retired {
                t.push_str(&format!(
                    "  - {} ({kind}): karpctl's policies replace it and `up --adopt` takes it off the role: forget its\n\
                     \x20   resource too (`terraform state rm '<its address>'`, or a `removed` block) and delete its block.\n",
                    p.id
                ));
            } else {
                t.push_str(&format!("  - {} ({kind}): kept; keep its resource, with `role = local.{role}`.\n", p.id));
            }
        }
    }
    t
}

/// The module's outputs as one `locals` block, indented two spaces.
pub fn terraform_locals(module: &str, outputs: &[ModuleOutput]) -> String {
    let width = outputs.iter().map(|o| local_name(module, o.name).len()).max().unwrap_or(0);
    let mut t = String::from("  locals {\n");
    for o in outputs {
        let value = o.value.as_deref().map(hcl_string).unwrap_or_else(|| "null".to_string());
        t.push_str(&format!("    {:width$} = {value} # {}\n", local_name(module, o.name), o.source));
    }
    t.push_str("  }\n");
    t
}

/// An HCL string literal (`"` and `\\` escaped, `${` and `%{` not read as templates).
fn hcl_string(s: &str) -> String {
    let escaped = s.replace('\\', "\\\\").replace('"', "\\\"").replace("${", "$${").replace("%{", "%%{");
    format!("\"{escaped}\"")
}

/// The jq program the CloudFormation let-go defines as `$retained`: true only when every resource
/// of the template `get-template --query TemplateBody --output json` prints has `DeletionPolicy:
/// Retain`. The AWS CLI gives a JSON template as an object (checked exactly) and a YAML one as a
/// string, read line by line: `Resources:` at the margin, each resource a `Name:` line at its
/// indentation, and among the attribute lines of each (at their own indentation, deeper lines and
/// comments left out) at least one `DeletionPolicy` and none that is not `Retain`. Anything else
/// (flow style, anchors, tabs, an indentation out of place, no resources) answers false: the
/// check may refuse a template that retains, never pass one that does not.
pub const RETAINED_CHECK: &str = r#"retained='def ind: capture("^(?<s> *)").s | length;
def yaml: (split("\n") | map(sub("\r$"; ""))) as $l
  | ($l | map(test("^Resources: *(#.*)?$")) | index(true)) as $i
  | if $i == null then false else $l[$i+1:] as $r
    | ($r | map(test("^[^ #]")) | index(true)) as $e
    | (if $e == null then $r else $r[:$e] end) | map(select(test("^\\s*(#.*)?$") | not)) as $b
    | if ($b | length) == 0 or ($b | map(test("^ *\t")) | any) then false else ($b[0] | ind) as $n
      | reduce $b[] as $x ([]; if ($x | ind) == $n then . + [[$x]]
          elif length > 0 and ($x | ind) > $n then .[length - 1] += [$x] else . + [[]] end)
      | length > 0 and (map(length > 1 and (.[0] | test("^ {\($n)}[A-Za-z0-9]+: *(#.*)?$"))
          and ((.[1] | ind) as $m | $m > $n and (.[1:] | map(ind >= $m) | all)
            and ([.[1:][] | select(ind == $m and test("^ *DeletionPolicy *:"))] as $d | ($d | length) > 0
              and ($d | map(test("^ *DeletionPolicy: *(Retain|\"Retain\"|\u0027Retain\u0027) *(#.*)?$")) | all))))
        | all) end end;
if type == "object" then (.Resources | type == "object" and length > 0)
  and ([.Resources[] | select(.DeletionPolicy != "Retain")] | length == 0)
elif type == "string" then yaml else false end'"#;

/// One stack's chained steps. `get-template --output json` keeps a JSON template whole (text
/// output flattens it) and `jq -r .` prints a YAML body as it is.
fn cfn_steps(s: &Stack) -> String {
    let get = "aws cloudformation get-template --stack-name \"$s\" --query TemplateBody --output json | jq -r .";
    let check = "aws cloudformation get-template --stack-name \"$s\" --query TemplateBody --output json | jq -e \"$retained\"";
    let params = if s.parameters.is_empty() {
        String::new()
    } else {
        let p: Vec<String> = s.parameters.iter().map(|p| format!("ParameterKey={p},UsePreviousValue=true")).collect();
        format!(" \\\n      --parameters {}", p.join(" "))
    };
    format!(
        "\n  s={name}\n\
         \x20 {get} > \"$s.template\"\n\
         \x20 # edit $s.template: add `DeletionPolicy: Retain` (JSON: \"DeletionPolicy\": \"Retain\") to every resource, then:\n\
         \x20 aws cloudformation update-stack --stack-name \"$s\" --template-body \"file://$s.template\" \\\n\
         \x20     --capabilities CAPABILITY_NAMED_IAM{params} \\\n\
         \x20   && aws cloudformation wait stack-update-complete --stack-name \"$s\" \\\n\
         \x20   && {check} \\\n\
         \x20   && aws cloudformation delete-stack --stack-name \"$s\" \\\n\
         \x20   && aws cloudformation wait stack-delete-complete --stack-name \"$s\"\n",
        name = s.name
    )
}

pub fn human(r: &ImportReport, style: Style) -> String {
    let mut t = format!("karpctl import: cluster {}\n\nFound:\n", r.cluster);
    let width = r.found_lines.iter().map(|(k, _)| k.len()).max().unwrap_or(0);
    for (k, v) in &r.found_lines {
        t.push_str(&format!("  {k:width$}  {v}\n"));
    }
    t.push_str(&format!("\nWrote {}:\n\n", r.path.display()));
    for l in r.text.lines() {
        t.push_str(&format!("  {l}\n"));
    }
    for n in &r.notes {
        t.push_str(&format!("\n{} {n}", style.yellow("note:")));
    }
    if !r.notes.is_empty() {
        t.push('\n');
    }
    match &r.diff {
        Ok(diff) => {
            t.push_str(&format!("\nWhat `karpctl up --cluster {} --adopt` will then change:\n\n", r.cluster));
            t.push_str(&super::human::render_plan(&diff.plan, style));
            // An error-level check makes `up --adopt` exit 1 after applying: say so now.
            if let Some(checks) = &diff.readiness {
                t.push_str(&super::human::readiness(checks, diff.pin.as_ref(), style));
            }
        }
        Err(e) => t.push_str(&format!(
            "\n{} `karpctl up --cluster {} --adopt` would refuse the plan as written: {e}\nMend {} (the notes above say what was left out), then run `karpctl diff --cluster {} --adopt`.\n",
            style.red("error:"),
            r.cluster,
            r.path.display(),
            r.cluster
        )),
    }
    t.push('\n');
    t.push_str(&let_go_text(&r.let_go));
    t.push_str(&format!(
        "\nThen: karpctl up --cluster {c} --adopt   ({})\n      karpctl diff --cluster {c}          (exit 0)\n",
        r.diff.as_ref().map(|d| up_adopt_summary(&d.plan)).unwrap_or_else(|_| "once the plan is mended".to_string()),
        c = r.cluster
    ));
    t
}

/// What `up --adopt` does, in a few words: "nothing is deleted" only when nothing is.
fn up_adopt_summary(plan: &crate::model::Plan) -> String {
    let (_, _, destroy) = plan.counts();
    if destroy == 0 {
        "one run; nothing is deleted or made again".to_string()
    } else {
        format!("one run; nothing is made again; the {destroy} step(s) marked - above take off what karpctl's policies replace")
    }
}

pub fn json_doc(r: &ImportReport) -> Value {
    let let_go = match &r.let_go {
        LetGo::Terraform { module, steps } => json!({
            "tool": "terraform", "module": module, "state_rm": [module],
            "outputs": steps.outputs.iter().map(|o| json!({
                "output": format!("{module}.{}", o.name), "local": format!("local.{}", local_name(module, o.name)),
                "value": o.value, "source": o.source,
            })).collect::<Vec<_>>(),
            "policies": steps.policies.iter().map(|p| json!({"policy": p.id, "retired": p.retired})).collect::<Vec<_>>(),
        }),
        LetGo::CloudFormation { stacks } => json!({
            "tool": "cloudformation",
            "stacks": stacks.iter().map(|s| json!({"name": s.name, "parameters": s.parameters})).collect::<Vec<_>>(),
        }),
        LetGo::Unknown => json!({"tool": null}),
    };
    json!({
        "format_version": super::json::FORMAT_VERSION,
        "command": "import",
        "cluster": r.cluster,
        "plan_file": r.path.display().to_string(),
        "plan_text": r.text,
        "found": r.found_lines.iter().map(|(k, v)| json!({"piece": k, "found": v})).collect::<Vec<_>>(),
        "notes": r.notes,
        "up_adopt": r.diff.as_ref().map(super::json::plan_doc).unwrap_or(Value::Null),
        "error": r.diff.as_ref().err(),
        "let_go": let_go,
        "stats": serde_json::to_value(&r.stats).unwrap_or_default(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Run one stack's printed chain (with the `retained` check defined as printed) against a
    /// stand-in `aws` that answers `get-template` with `template` (what `--output json` prints),
    /// says the stack has two resources, and records every other call: whether it deleted the
    /// stack.
    fn chain_deletes(template: &serde_json::Value) -> bool {
        let jq = std::process::Command::new("jq").arg("--version").output();
        assert!(jq.is_ok_and(|o| o.status.success()), "this test runs the printed chain, which needs jq on PATH");
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("calls");
        std::fs::write(dir.path().join("template.json"), template.to_string()).unwrap();
        let aws = dir.path().join("aws");
        std::fs::write(
            &aws,
            format!(
                "#!/bin/sh\necho \"$*\" >> '{log}'\ncase \"$2\" in\n  get-template) cat '{t}' ;;\n  list-stack-resources) echo 2 ;;\nesac\n",
                log = log.display(),
                t = dir.path().join("template.json").display()
            ),
        )
        .unwrap();
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&aws, std::fs::Permissions::from_mode(0o755)).unwrap();
        let text =
            let_go_text(&LetGo::CloudFormation { stacks: vec![Stack { name: "Karpenter-c1".into(), parameters: vec![] }] });
        let define = &text[text.find("  retained='").unwrap()..];
        let define = &define[..define.find("'\n").unwrap() + 2];
        let block = &text[text.find("\n  s=").unwrap()..];
        let block = &block[..block.find("stack-delete-complete").unwrap() + "stack-delete-complete --stack-name \"$s\"".len()];
        // `aws` is a shell function standing in for the CLI; jq is the real one.
        let stand_in = format!("aws() {{ '{}' \"$@\"; }}\n", aws.display());
        let out = std::process::Command::new("sh")
            .arg("-c")
            .arg(format!("{stand_in}{define}{block}\n"))
            .current_dir(dir.path())
            .output()
            .unwrap();
        let calls = std::fs::read_to_string(&log).unwrap_or_default();
        assert!(calls.contains("cloudformation update-stack"), "the chain ran: {out:?} {calls}");
        calls.contains("cloudformation delete-stack")
    }

    fn yaml(lines: &[&str]) -> serde_json::Value {
        serde_json::Value::String(lines.join("\n") + "\n")
    }

    #[test]
    fn the_let_go_chain_deletes_a_stack_only_when_every_resource_is_retained() {
        let json = |b: &str| serde_json::json!({"Resources": {"A": {"Type": "AWS::SQS::Queue", "DeletionPolicy": "Retain"}, "B": {"Type": "AWS::IAM::Role", "DeletionPolicy": b}}});
        assert!(chain_deletes(&json("Retain")), "a JSON template that retains everything");
        assert!(!chain_deletes(&json("Delete")), "a JSON template with one resource not retained");
        let guide = yaml(&[
            "AWSTemplateFormatVersion: \"2010-09-09\"",
            "Resources:",
            "  KarpenterNodeRole:",
            "    Type: \"AWS::IAM::Role\"",
            "    DeletionPolicy: Retain",
            "    Properties:",
            "      RoleName: !Sub \"KarpenterNodeRole-${ClusterName}\"",
            "  KarpenterInterruptionQueue:",
            "    Type: AWS::SQS::Queue",
            "    DeletionPolicy: \"Retain\"",
            "Outputs:",
            "  Role:",
            "    Value: !Ref KarpenterNodeRole",
        ]);
        assert!(chain_deletes(&guide), "a YAML template that retains everything");
        // As many `DeletionPolicy: Retain` lines as resources, but one resource is not retained:
        // counting lines deleted the queue with its stack.
        let counted = yaml(&[
            "Resources:",
            "  KarpenterInterruptionQueue:",
            "    Type: AWS::SQS::Queue",
            "    # DeletionPolicy: Retain",
            "  KarpenterNodeRole:",
            "    Type: AWS::IAM::Role",
            "    DeletionPolicy: Retain",
            "    Metadata:",
            "      Note: DeletionPolicy: Retain",
        ]);
        assert!(!chain_deletes(&counted), "a comment or a nested line retains nothing");
        let flow = yaml(&["Resources:", "  Queue: {Type: AWS::SQS::Queue, DeletionPolicy: Retain}"]);
        assert!(!chain_deletes(&flow), "what the line check cannot read counts as not retained");
    }

    /// "Nothing is deleted" only when the plan deletes nothing.
    #[test]
    fn the_closing_line_says_nothing_is_deleted_only_when_true() {
        let mut plan = crate::report::human::tests::takeover_plan();
        let with_retirement = up_adopt_summary(&plan);
        assert!(!with_retirement.contains("nothing is deleted"), "{with_retirement}");
        assert!(with_retirement.contains("the 1 step(s) marked -"), "{with_retirement}");
        plan.steps.retain(|s| s.action != crate::model::Action::Delete);
        assert_eq!(up_adopt_summary(&plan), "one run; nothing is deleted or made again");
    }
}
