//! Interop with the real agno package from PyPI on a JSON directory (agno's `JsonDb`):
//! agno 2.9.0 writes a legacy directory, we migrate it and agno 3.1.10 reads it back exactly
//! as its own migration of a copy; agno 3.1.10 reads what we write; we read what it writes.
//!
//! Needs `AGNO_TEST_PYTHON_V2` and `AGNO_TEST_PYTHON_V3` (python executables of venvs with
//! agno 2.9.0 and 3.1.10; `./scripts/test.sh` builds them). Without them the tests are
//! skipped with a note, except under `CI=true`, where they fail. The driver runs with
//! `TZ=UTC` (`agno_storage_testkit::interop::run_driver`): agno writes memory timestamps in the
//! host's local time without an offset and reads them back as UTC, so only a UTC host reads
//! its own memories back unchanged.

mod common;

use std::path::{Path, PathBuf};

use agno_storage_core::{async_trait, AgnoDb};
use agno_storage_json::JsonDb;
use agno_storage_testkit::interop::{
    agno, agno_json, agno_python, agno_surrogate_read_back, assert_surrogate_reads, runtime,
    FixtureReadBack, InteropTarget,
};
use serde_json::Value;

/// A scratch directory both sides open.
struct Dir(PathBuf);

impl Dir {
    fn new(label: &str) -> Dir {
        Dir(common::scratch_dir(label))
    }
}

#[async_trait]
impl InteropTarget for Dir {
    fn driver(&self) -> PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../interop/agno_json_driver.py")
    }

    fn args(&self) -> Vec<String> {
        vec![format!("json:{}", self.0.display())]
    }

    async fn open(&self) -> AgnoDb {
        JsonDb::open_local(&self.0)
            .await
            .expect("open the directory")
            .agno_db()
    }
}

#[test]
fn v2_directory_migrates_like_agno() {
    let (Some(v2), Some(v3)) = (
        agno_python("AGNO_TEST_PYTHON_V2"),
        agno_python("AGNO_TEST_PYTHON_V3"),
    ) else {
        return;
    };
    let (a, b) = (Dir::new("v2a"), Dir::new("v2b"));
    agno_storage_testkit::interop::v2_migrates_like_agno(&v2, &v3, &a, &b);
    // The legacy blob stays as agno's backup, so agno's own cleanup still refuses unforced.
    let sessions: Value =
        serde_json::from_slice(&std::fs::read(a.0.join("agno_sessions.json")).unwrap()).unwrap();
    assert!(sessions[0]["runs"].is_array());
}

#[test]
fn agno_reads_what_we_write() {
    let Some(v3) = agno_python("AGNO_TEST_PYTHON_V3") else {
        return;
    };
    let dir = Dir::new("ours");
    let read_back = FixtureReadBack {
        memory_created_at: None,
        ..FixtureReadBack::default()
    };
    let d = agno_storage_testkit::interop::agno_reads_what_we_write(&v3, &dir, &read_back);
    assert_eq!(d["sessions"][0]["created_at"], 1_720_000_000);
    let memories = agno_json(&v3, "memories-v3", &dir);
    assert_eq!(memories[0]["created_at"], 1_720_000_200, "{memories}");
}

#[test]
fn we_read_what_agno_writes() {
    let Some(v3) = agno_python("AGNO_TEST_PYTHON_V3") else {
        return;
    };
    let dir = Dir::new("theirs");
    let m = agno_storage_testkit::interop::we_read_what_agno_writes(&v3, &dir);
    assert_eq!(m.created_at, 1_710_000_100);
    runtime().block_on(async {
        // A write of ours into agno's directory keeps agno's layout readable to agno.
        dir.open()
            .await
            .sessions()
            .unwrap()
            .rename_session("py-s1", "Renamed by Rust", Some("carol"))
            .await
            .unwrap()
            .expect("rename");
    });
    let d = agno_json(&v3, "dump-v3", &dir);
    assert_eq!(
        d["sessions"][0]["session_data"]["session_name"],
        "Renamed by Rust"
    );
    assert_eq!(d["sessions"][0]["runs"].as_array().map(Vec::len), Some(2));
}

/// agno writes a lone surrogate (`"caf\udce9.txt"`) into one run of a session. Our session
/// read hands every run over, that one as its stored text; `get_runs` lists the other two
/// and names the third as unreadable; a run we append rewrites the runs file with agno's
/// rows byte for byte (the undecodable one as it was read), and agno reads all four back.
#[test]
fn lone_surrogates_agno_writes_are_kept_byte_identical() {
    let Some(v3) = agno_python("AGNO_TEST_PYTHON_V3") else {
        return;
    };
    let dir = Dir::new("surrogates");
    agno(&v3, "write-surrogates", &dir);
    let runs_file = dir.0.join("agno_runs.json");
    let before = std::fs::read_to_string(&runs_file).expect("agno wrote its runs file");
    assert!(before.contains(r"caf\udce9.txt"), "{before}");
    runtime().block_on(async {
        let db = dir.open().await;
        let text = assert_surrogate_reads(&db).await;
        assert!(before.contains(&text), "{text}");
        let err = db
            .runs()
            .unwrap()
            .get_run("sur-r1", Some("dave"))
            .await
            .expect_err("the run is named, not missing");
        assert_eq!(err.kind(), agno_storage_core::ErrorKind::Serialization);
        let run = agno_storage_core::RunRecord::from_run_data(
            "sur-s1",
            Some("dave".into()),
            serde_json::json!({"run_id": "sur-r3", "agent_id": "agent-py", "content": "from Rust"}),
        )
        .expect("a run");
        db.runs().unwrap().upsert_run(run).await.expect("append");
    });
    let after = std::fs::read_to_string(&runs_file).expect("the runs file");
    let kept = before
        .trim_end()
        .strip_suffix(']')
        .expect("a JSON list")
        .trim_end();
    assert!(
        after.starts_with(kept),
        "agno's rows must be rewritten byte for byte:\n{after}"
    );
    assert_eq!(
        agno(&v3, "read-surrogates", &dir).trim(),
        agno_surrogate_read_back("Surrogates", &["from Rust"])
    );
}
