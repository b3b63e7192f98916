//! Memoised async lookups, one typed memo per read: callers sharing a read make one call;
//! `forget` drops an entry after a write. A failure is not kept (the next caller asks again).

use anyhow::Result;
use std::collections::HashMap;
use std::future::Future;
use std::sync::{Arc, Mutex};
use tokio::sync::OnceCell;

/// Memoised async lookups, so that kinds sharing a read (a queue and its policy) make one call.
pub struct Memo<T: Clone> {
    cells: Mutex<HashMap<String, Arc<OnceCell<T>>>>,
}

impl<T: Clone> Default for Memo<T> {
    fn default() -> Self {
        Memo { cells: Mutex::new(HashMap::new()) }
    }
}

impl<T: Clone> Memo<T> {
    pub async fn get<F, Fut>(&self, key: &str, f: F) -> Result<T>
    where
        F: FnOnce() -> Fut,
        Fut: Future<Output = Result<T>>,
    {
        let cell = self.cells.lock().unwrap().entry(key.to_string()).or_default().clone();
        cell.get_or_try_init(f).await.cloned()
    }
    pub fn put(&self, key: &str, value: T) {
        let cell = Arc::new(OnceCell::new_with(Some(value)));
        self.cells.lock().unwrap().insert(key.to_string(), cell);
    }
    pub fn forget(&self, key: &str) {
        self.cells.lock().unwrap().remove(key);
    }
    pub fn clear(&self) {
        self.cells.lock().unwrap().clear();
    }
}
