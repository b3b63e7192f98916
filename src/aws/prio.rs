//! The counting semaphore behind the request limiters (`Limiter`): a freed permit goes to the
//! waiting request of the highest priority, first come first served among equals. EKS comes
//! first: its calls take hundreds of milliseconds and lead each cluster's longest chain.

use std::collections::BinaryHeap;
use std::sync::{Arc, Mutex};
use tokio::sync::oneshot;

/// The priority of a request to AWS service `service` (its SigV4 signing name): EKS first.
pub fn priority_of(service: &str) -> u8 {
    match service {
        "eks" => 1,
        _ => 0,
    }
}

/// The (Region, signing name) of a SigV4 `Authorization` header's credential scope
/// (`Credential=<key>/<date>/<region>/<service>/aws4_request`).
pub fn signing_scope(authorization: &str) -> Option<(&str, &str)> {
    let scope = authorization.split("Credential=").nth(1)?.split([',', ' ']).next()?;
    let parts: Vec<&str> = scope.split('/').collect();
    (parts.len() == 5).then(|| (parts[2], parts[3]))
}

#[derive(Debug)]
pub struct PrioSemaphore {
    state: Mutex<State>,
}

#[derive(Debug)]
struct State {
    available: usize,
    waiters: BinaryHeap<Waiter>,
    seq: u64,
}

#[derive(Debug)]
struct Waiter {
    prio: u8,
    seq: u64,
    tx: oneshot::Sender<Permit>,
}

impl PartialEq for Waiter {
    fn eq(&self, other: &Self) -> bool {
        (self.prio, self.seq) == (other.prio, other.seq)
    }
}
impl Eq for Waiter {}
impl PartialOrd for Waiter {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Waiter {
    /// The heap's greatest: the highest priority, then the earliest.
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.prio.cmp(&other.prio).then(other.seq.cmp(&self.seq))
    }
}

/// One permit; dropping it hands it to the next waiter (or back to the semaphore).
#[derive(Debug)]
pub struct Permit {
    sem: Arc<PrioSemaphore>,
}

impl Drop for Permit {
    fn drop(&mut self) {
        self.sem.release();
    }
}

impl PrioSemaphore {
    pub fn new(permits: usize) -> Arc<Self> {
        Arc::new(PrioSemaphore { state: Mutex::new(State { available: permits, waiters: BinaryHeap::new(), seq: 0 }) })
    }

    /// Wait for a permit. Cancel-safe: a waiter dropped before or after its permit was handed
    /// over loses nothing (the permit goes to the next waiter, or back).
    pub async fn acquire(self: &Arc<Self>, prio: u8) -> Permit {
        let rx = {
            let mut s = self.state.lock().unwrap();
            if s.available > 0 {
                s.available -= 1;
                return Permit { sem: self.clone() };
            }
            let (tx, rx) = oneshot::channel();
            s.seq += 1;
            let seq = s.seq;
            s.waiters.push(Waiter { prio, seq, tx });
            rx
        };
        // The sender is only ever consumed by a send (in `release`), and the semaphore outlives
        // its waiters (they hold an Arc of it through `self`).
        rx.await.expect("a waiter's sender is always sent on")
    }

    fn release(self: &Arc<Self>) {
        let mut s = self.state.lock().unwrap();
        while let Some(w) = s.waiters.pop() {
            match w.tx.send(Permit { sem: self.clone() }) {
                Ok(()) => return,
                // That waiter gave up: its permit is still ours to give (not dropped, which
                // would release again under this lock).
                Err(p) => std::mem::forget(p),
            }
        }
        s.available += 1;
    }

    #[cfg(test)]
    fn available(&self) -> usize {
        self.state.lock().unwrap().available
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_the_signing_region_and_service_from_a_sigv4_header() {
        let h = "AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/20261203/us-east-1/eks/aws4_request, SignedHeaders=host;x-amz-date, Signature=abc";
        assert_eq!(signing_scope(h), Some(("us-east-1", "eks")));
        assert_eq!(
            signing_scope("AWS4-HMAC-SHA256 Credential=A/20261203/us-east-2/cloudtrail/aws4_request,Signed"),
            Some(("us-east-2", "cloudtrail"))
        );
        assert_eq!(signing_scope("Basic xyz"), None);
        assert_eq!(super::super::throttle::pacer_key("cloudtrail", "us-east-2"), "cloudtrail/us-east-2");
        assert_eq!(super::super::throttle::pacer_key("iam", "us-east-2"), "iam");
        assert_eq!(priority_of("eks"), 1);
        assert_eq!(priority_of("iam"), 0);
    }

    #[tokio::test]
    async fn a_freed_permit_goes_to_the_highest_priority_then_the_earliest() {
        let sem = PrioSemaphore::new(1);
        let held = sem.acquire(0).await;
        let order = Arc::new(Mutex::new(Vec::new()));
        let mut tasks = Vec::new();
        for (name, prio) in [("low-1", 0), ("high-1", 1), ("low-2", 0), ("high-2", 1)] {
            let (s2, order) = (sem.clone(), order.clone());
            tasks.push(tokio::spawn(async move {
                let _p = s2.acquire(prio).await;
                order.lock().unwrap().push(name);
            }));
            tokio::task::yield_now().await;
            while sem.state.lock().unwrap().waiters.len() < tasks.len() {
                tokio::task::yield_now().await;
            }
        }
        drop(held);
        for t in tasks {
            t.await.unwrap();
        }
        assert_eq!(*order.lock().unwrap(), ["high-1", "high-2", "low-1", "low-2"]);
        assert_eq!(sem.available(), 1);
    }

    #[tokio::test]
    async fn a_waiter_that_gives_up_loses_no_permit() {
        let sem = PrioSemaphore::new(1);
        let held = sem.acquire(0).await;
        // Waits, then is dropped while waiting.
        let gone = {
            let sem = sem.clone();
            tokio::spawn(async move { sem.acquire(1).await })
        };
        while sem.state.lock().unwrap().waiters.is_empty() {
            tokio::task::yield_now().await;
        }
        gone.abort();
        let _ = gone.await;
        drop(held);
        assert_eq!(sem.available(), 1, "the permit came back");
        // Handed over, then the receiver dropped unread: the permit comes back too.
        let held = sem.acquire(0).await;
        let (tx, rx) = oneshot::channel();
        sem.state.lock().unwrap().waiters.push(Waiter { prio: 0, seq: 99, tx });
        drop(held);
        drop(rx);
        assert_eq!(sem.available(), 1);
    }
}
