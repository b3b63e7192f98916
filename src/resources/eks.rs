//! Whether the cluster can take EKS writes now, shared by the access entry, the Pod Identity
//! association and the agent add-on: one bounded wait for ACTIVE that every EKS step shares; on a
//! cluster that is gone, DELETING or FAILED their deletes are skipped (docs/aws-behaviour.md 9.8).

use crate::aws::{self, Classify, ConsistencyPolicy, aws_err};
use crate::ctx::{Ctx, eks_cluster_of};
use crate::events::Event;
use crate::facts::prepared::{CLUSTER_NOT_FOUND, ClusterState};
use crate::model::{Action, Step, Tags};
use anyhow::Result;
use std::sync::Mutex;
use std::time::Duration;

/// The add-on EKS Pod Identity needs on the cluster.
pub const POD_IDENTITY_AGENT: &str = "eks-pod-identity-agent";

/// Seconds the EKS steps wait for a CREATING / UPDATING / PENDING cluster to become ACTIVE.
pub const ACTIVE_TIMEOUT_ENV: &str = crate::settings::EKS_ACTIVE_TIMEOUT_SECS;

/// The status prepare read (so that an ACTIVE cluster costs no second DescribeCluster).
pub fn remember_status(ctx: &Ctx, cluster: &str, status: &str) {
    ctx.readers.eks.remember_status(cluster, (status != CLUSTER_NOT_FOUND).then(|| status.to_string()));
}

/// The status prepare read (DescribeCluster now if it read none).
pub async fn remembered_status(ctx: &Ctx, cluster: &str) -> Result<String> {
    Ok(ctx.readers.eks.status(cluster).await?.unwrap_or_else(|| CLUSTER_NOT_FOUND.to_string()))
}

/// Poll every 2 s for the first 20 s (a test or a short update), then back off to 30 s.
fn active_policy(ctx: &Ctx) -> ConsistencyPolicy {
    ConsistencyPolicy {
        deadline: ctx.settings.eks_active_timeout,
        fast: Duration::from_secs(2),
        fast_for: Duration::from_secs(20),
        initial: Duration::from_secs(5),
        max: Duration::from_secs(30),
    }
}

/// DescribeCluster's status now (`CLUSTER_NOT_FOUND` when there is no such cluster).
pub async fn status_now(ctx: &Ctx, cluster: &str) -> Result<String> {
    Ok(ctx.readers.eks.status_now(cluster).await?.unwrap_or_else(|| CLUSTER_NOT_FOUND.to_string()))
}

/// The cluster's status once it is no longer busy (ACTIVE, gone, DELETING, FAILED), or the busy
/// status it still has when the wait's bound passes. One wait per run and cluster, shared by
/// every EKS step (the first caller's step shows the progress).
pub async fn settled_status(ctx: &Ctx, cluster: &str, step_id: &str) -> Result<String> {
    ctx.once.settled_status.get(cluster, || async {
        let first = remembered_status(ctx, cluster).await?;
        if ClusterState::of(&first) != ClusterState::Busy {
            return Ok(first);
        }
        let last = Mutex::new(first.clone());
        let policy = active_policy(ctx);
        let what = format!(
            "EKS cluster {cluster} to become ACTIVE (it is {first}; IAM, SQS, EventBridge and EC2 steps go on; the EKS steps wait up to {} s, {ACTIVE_TIMEOUT_ENV})",
            policy.deadline.as_secs()
        );
        aws::wait_until(&policy, ctx.reporter.as_ref(), step_id, &what, || async {
            let s = status_now(ctx, cluster).await?;
            let settled = ClusterState::of(&s) != ClusterState::Busy;
            *last.lock().unwrap() = s;
            Ok(settled)
        })
        .await?;
        let s = last.lock().unwrap().clone();
        Ok(s)
    })
    .await
}

/// Put the add-on install off until the cluster is ACTIVE (`preflight::create_agent`).
pub fn defer_agent(ctx: &Ctx, cluster: &str, tags: &Tags) {
    ctx.once.agent_pending.put(cluster, Some(tags.clone()));
}

/// The add-on install put off by `defer_agent`, made once (the caller has waited for ACTIVE).
pub async fn install_pending_agent(ctx: &Ctx, cluster: &str) -> Result<()> {
    let pending: Option<Tags> = ctx.once.agent_pending.get(cluster, || async { Ok(None) }).await?;
    let Some(tags) = pending else { return Ok(()) };
    ctx.once.agent_installed.get(cluster, || async { install_agent(ctx, cluster, &tags).await.map(|_| true) }).await?;
    Ok(())
}

/// CreateAddon for the Pod Identity agent (installed meanwhile by someone else is fine).
pub async fn install_agent(ctx: &Ctx, cluster: &str, tags: &Tags) -> Result<()> {
    let r = ctx
        .aws
        .eks
        .create_addon()
        .cluster_name(cluster)
        .addon_name(POD_IDENTITY_AGENT)
        .set_tags((!tags.is_empty()).then(|| tags.clone().into_iter().collect()))
        .send()
        .await;
    match r {
        Ok(_) => {}
        Err(e) if e.is_resource_in_use() => {}
        Err(e) => return Err(aws_err("eks:CreateAddon", e).context(format!("installing the {POD_IDENTITY_AGENT} add-on"))),
    }
    ctx.reporter.event(Event::Info(&format!(
        "Installed the {POD_IDENTITY_AGENT} add-on on cluster {cluster} (create_pod_identity_agent = true); karpctl down leaves it installed"
    )));
    Ok(())
}

/// In words, for messages: what a gone / DELETING / FAILED cluster means.
fn going(status: &str) -> &'static str {
    match status {
        CLUSTER_NOT_FOUND => "no longer exists",
        "DELETING" => "is being deleted",
        _ => "is FAILED (it can only be deleted)",
    }
}

/// Whether an EKS step may make its call now: Ok(true) once the cluster is ACTIVE (after the
/// shared wait if it was busy); Ok(false) for a delete on a cluster that is gone, DELETING or
/// FAILED (the object goes with the cluster; a line says so); an error otherwise.
pub async fn gate(ctx: &Ctx, step: &Step) -> Result<bool> {
    let cluster = eks_cluster_of(ctx, &step.node);
    let status = settled_status(ctx, cluster, &step.id).await?;
    let what = format!("{} {}", step.kind.label(), step.name);
    match (ClusterState::of(&status), step.action) {
        (ClusterState::Active, _) => Ok(true),
        (ClusterState::Going, Action::Delete) => {
            ctx.reporter.event(Event::Info(&format!(
                "{}: skipped {what}: EKS cluster {cluster} {}, and it went with the cluster",
                step.id,
                going(&status)
            )));
            Ok(false)
        }
        // A step's error is shown as its message only, so the remedy goes in it.
        (ClusterState::Going, _) => anyhow::bail!(
            "{what} was not written: EKS cluster {cluster} {} ({status}); run `karpctl down` to remove what karpctl made around it, or re-create the cluster and run `karpctl up`",
            going(&status)
        ),
        (ClusterState::Busy, _) => anyhow::bail!(
            "{what} was not written: EKS cluster {cluster} was still {status} after waiting {} s for it to become ACTIVE (the steps that do not need the cluster went on); run `karpctl up` again once `aws eks describe-cluster --name {cluster} --query cluster.status` says ACTIVE, or wait longer by setting {ACTIVE_TIMEOUT_ENV} (seconds)",
            ctx.settings.eks_active_timeout.as_secs()
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statuses_map_to_what_eks_steps_do() {
        assert_eq!(ClusterState::of("ACTIVE"), ClusterState::Active);
        for s in ["CREATING", "UPDATING", "PENDING", "SOMETHING_NEW"] {
            assert_eq!(ClusterState::of(s), ClusterState::Busy, "{s}");
        }
        for s in [CLUSTER_NOT_FOUND, "DELETING", "FAILED"] {
            assert_eq!(ClusterState::of(s), ClusterState::Going, "{s}");
        }
    }
}
