//! Reading the live state of every node: the read-ahead started during preparation, the reads
//! of the nodes (slowest kinds first, at most `concurrency` in flight), and the discovery of
//! owned objects the plan no longer names.

use crate::ctx::Ctx;
use crate::model::{Node, Observed};
use crate::resources;
use anyhow::{Context, Result};
use futures::StreamExt;
use std::sync::Arc;

/// Reads started before preflight is done, as soon as the account is known: the reads of every
/// node that does not depend on the cluster's facts (all but the discovery tags, which need the
/// selected subnets), built from the plan and the account alone, and the discovery of objects
/// the plan no longer names. Reads take only a node's kind, name and spec; `observe` uses a read
/// ahead only for a node that turned out the same once the cluster's facts were in (it differs,
/// for example, for an IPv6 cluster's node policies or an existing node role with a path), and
/// the discovery only when every node did. A read that failed here fails the observation, as it
/// would have there (after the SDK's own retries; it is not made twice), once preflight has
/// passed. Dropping it (preflight failed) cancels what is still in flight.
pub struct ReadAhead(crate::ctx::Background<AheadReads>);

pub struct AheadReads {
    nodes: Vec<Node>,
    reads: Vec<(Node, Result<Option<Observed>>)>,
    found: Result<Vec<(Node, Option<Observed>)>>,
}

impl AheadReads {
    /// Whether a node of `kind` the plan wants was read as absent: the plan will create one.
    pub fn creates(&self, kind: crate::model::Kind) -> bool {
        self.reads.iter().any(|(n, o)| n.kind == kind && n.fields.is_some() && matches!(o, Ok(None)))
    }
}

impl ReadAhead {
    pub fn start(ctx: Arc<Ctx>, nodes: Vec<Node>, concurrency: usize) -> ReadAhead {
        ReadAhead(crate::ctx::Background::spawn(async move {
            let nodes: Vec<Node> = nodes.into_iter().filter(|n| resources::def(n.kind).read_ahead).collect();
            let mut order = nodes.clone();
            order.sort_by_key(|n| resources::read_rank(n.kind));
            let reads = futures::stream::iter(order)
                .map(|n| {
                    let ctx = ctx.clone();
                    async move {
                        let o = read_node(&ctx, &n).await;
                        (n, o)
                    }
                })
                .buffer_unordered(concurrency.max(1))
                .collect::<Vec<_>>();
            let found = observe_unlisted(&ctx, &nodes, concurrency);
            let (reads, found) = tokio::join!(reads, found);
            AheadReads { nodes, reads, found }
        }))
    }

    pub async fn finish(self) -> Option<AheadReads> {
        self.0.join().await
    }
}

/// Read every node (and discover unlisted owned objects) with at most `concurrency` reads in flight.
/// The scoped discovery lists run at the same time as the reads of the known nodes; only the
/// objects they find wait for them.
pub async fn observe(ctx: &Arc<Ctx>, nodes: Vec<Node>, concurrency: usize) -> Result<Vec<(Node, Option<Observed>)>> {
    let known = observe_nodes(ctx, nodes.clone(), concurrency);
    let found = observe_unlisted(ctx, &nodes, concurrency);
    let (mut known, found) = tokio::try_join!(known, found)?;
    known.extend(found);
    Ok(known)
}

/// The owned objects the plan no longer names (see `resources::discover`), read.
pub async fn observe_unlisted(ctx: &Arc<Ctx>, nodes: &[Node], concurrency: usize) -> Result<Vec<(Node, Option<Observed>)>> {
    let discovered = crate::aws::in_unit("discovery:unlisted", resources::discover(ctx, nodes)).await?;
    observe_nodes(ctx, discovered, concurrency).await
}

/// `observe`, using what was read ahead: a node read ahead with the same kind, name and spec
/// keeps that read; the others are read now; the discovery read ahead is used when the read-ahead
/// saw exactly these nodes.
pub async fn observe_after(
    ctx: &Arc<Ctx>,
    nodes: Vec<Node>,
    concurrency: usize,
    ahead: AheadReads,
) -> Result<Vec<(Node, Option<Observed>)>> {
    let mut early: std::collections::HashMap<String, (Node, Result<Option<Observed>>)> =
        ahead.reads.into_iter().map(|(n, o)| (n.id.clone(), (n, o))).collect();
    let mut done: Vec<Option<Option<Observed>>> = Vec::with_capacity(nodes.len());
    let mut missing: Vec<Node> = Vec::new();
    for n in &nodes {
        match early.remove(&n.id) {
            Some((a, o)) if a.kind == n.kind && a.name == n.name && a.spec == n.spec => done.push(Some(o?)),
            _ => {
                done.push(None);
                missing.push(n.clone());
            }
        }
    }
    let planned: Vec<&Node> = nodes.iter().filter(|n| resources::def(n.kind).read_ahead).collect();
    let same_nodes = planned.len() == ahead.nodes.len() && planned.iter().zip(&ahead.nodes).all(|(a, b)| *a == b);
    let fresh = observe_nodes(ctx, missing, concurrency);
    let found = async {
        match same_nodes {
            true => ahead.found,
            false => observe_unlisted(ctx, &nodes, concurrency).await,
        }
    };
    let (fresh, found) = tokio::try_join!(fresh, found)?;
    let mut fresh = fresh.into_iter().map(|(_, o)| o);
    let mut out: Vec<(Node, Option<Observed>)> = nodes
        .into_iter()
        .zip(done)
        .map(|(n, d)| {
            let o = match d {
                Some(o) => o,
                None => fresh.next().expect("one fresh read per node not read ahead"),
            };
            (n, o)
        })
        .collect();
    out.extend(found);
    Ok(out)
}

/// One node's read, its error naming the node.
async fn read_node(ctx: &Ctx, n: &Node) -> Result<Option<Observed>> {
    resources::read(ctx, n).await.with_context(|| format!("reading {} {} ({})", n.kind.label(), n.name, n.id))
}

/// Read exactly these nodes, in order.
pub async fn observe_nodes(ctx: &Arc<Ctx>, all: Vec<Node>, concurrency: usize) -> Result<Vec<(Node, Option<Observed>)>> {
    // Slowest kinds first (see `read_rank`); unordered, so a finished read frees its slot at
    // once; the order is restored after.
    let mut all: Vec<(usize, Node)> = all.into_iter().enumerate().collect();
    all.sort_by_key(|(i, n)| (resources::read_rank(n.kind), *i));
    let results: Vec<Result<(usize, Node, Option<Observed>)>> = futures::stream::iter(all)
        .map(|(i, n)| {
            let ctx = ctx.clone();
            async move {
                let o = read_node(&ctx, &n).await?;
                Ok((i, n, o))
            }
        })
        .buffer_unordered(concurrency.max(1))
        .collect()
        .await;
    let mut done = results.into_iter().collect::<Result<Vec<_>>>()?;
    done.sort_by_key(|(i, _, _)| *i);
    Ok(done.into_iter().map(|(_, n, o)| (n, o)).collect())
}
