//! An exclusive advisory lock on a file (`flock` on Unix, `LockFileEx` on Windows), held
//! across processes until dropped. The operating system releases it when the process dies,
//! so a crash never leaves a directory locked.

use std::fs::{File, OpenOptions};
use std::path::PathBuf;

use agno_storage_core::{Error, ErrorKind, Result};

/// A held lock; dropping it closes the file and releases the lock.
pub(crate) struct LockFile {
    _file: File,
}

impl LockFile {
    /// Waits for the exclusive lock on `path`, creating the (empty) file when missing.
    pub(crate) async fn acquire(path: PathBuf) -> Result<LockFile> {
        let shown = path.display().to_string();
        let locked = tokio::task::spawn_blocking(move || -> std::io::Result<File> {
            let file = OpenOptions::new()
                .create(true)
                .truncate(false)
                .write(true)
                .open(&path)?;
            file.lock()?;
            Ok(file)
        })
        .await
        .map_err(|e| {
            Error::new(
                ErrorKind::Unexpected,
                format!("the task taking lock {shown} failed: {e}"),
            )
        })?;
        match locked {
            Ok(file) => Ok(LockFile { _file: file }),
            Err(e) => Err(Error::new(
                ErrorKind::Unavailable,
                format!("cannot lock {shown}: {e}; check that the directory is writable"),
            )
            .with_source(e)),
        }
    }
}
