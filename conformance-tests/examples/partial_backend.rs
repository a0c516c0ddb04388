//! A third-party-style backend that offers only sessions and runs, running the conformance
//! suite from its own crate: the cases it can serve run, the others are reported *ignored*
//! with the missing capability as their kind.
//!
//! The "adapter" here is `PartialStore`: it hands out the session and run stores of an
//! `InMemoryDb` and nothing else, the way a backend that has not implemented memories,
//! schedules, jobs or migrations yet would. A real adapter puts its own `SessionStore` and
//! `RunStore` implementations in their place.
//!
//! ```sh
//! cargo test -p conformance-tests --example partial_backend      # run as a test
//! cargo run -p conformance-tests --example partial_backend -- --list
//! ```

use std::process::ExitCode;
use std::sync::Arc;

use agno_storage_core::{AgnoDb, Capabilities, Result};
use agno_storage_doc::InMemoryDb;
use conformance_tests::{async_trait, Harness};

/// The adapter: a sessions+runs store.
mod partial_store {
    use super::*;

    /// What this backend offers, declared once and truthfully: sessions and runs, not
    /// durable (it lives in memory), nothing else.
    pub fn capabilities() -> Capabilities {
        Capabilities {
            sessions: true,
            runs: true,
            ..Capabilities::default()
        }
    }

    /// A fresh, empty database.
    pub fn open() -> AgnoDb {
        let store = Arc::new(InMemoryDb::new().stores());
        AgnoDb::builder("partial")
            .sessions(store.clone())
            .runs(store)
            .build()
    }
}

// The harness: the ten lines a backend author writes.
struct Partial;

#[async_trait]
impl Harness for Partial {
    fn name(&self) -> &str {
        "partial"
    }
    fn capabilities(&self) -> Capabilities {
        partial_store::capabilities()
    }
    async fn open(&self, _case: &str) -> Result<AgnoDb> {
        Ok(partial_store::open())
    }
}

fn main() -> ExitCode {
    // The declaration must match what the handle really holds.
    assert_eq!(
        partial_store::capabilities(),
        partial_store::open().capabilities()
    );
    conformance_tests::main(Partial)
}
