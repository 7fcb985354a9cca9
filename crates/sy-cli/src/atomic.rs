//! Atomic file output: write to a temporary file beside the target, sync, then rename.

use std::io::Write;
use std::path::Path;

use sha2::{Digest, Sha256};

use crate::ToolError;

/// Writes `bytes` to `path` atomically: a reader sees the old file or the whole new one, never a
/// partial file, and a failed write leaves no temporary file behind.
pub fn atomic_write(path: &Path, bytes: &[u8]) -> Result<(), ToolError> {
    let io = |what: &str, e: std::io::Error| {
        ToolError::Runtime(format!("{what} {}: {e}", path.display()))
    };
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d.to_path_buf(),
        _ => std::path::PathBuf::from("."),
    };
    std::fs::create_dir_all(&dir).map_err(|e| io("cannot create the directory of", e))?;
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "out".to_string());
    let tmp = dir.join(format!(".{name}.{}.tmp", std::process::id()));
    let result = (|| {
        let mut file = std::fs::File::create(&tmp)?;
        file.write_all(bytes)?;
        file.sync_all()?;
        std::fs::rename(&tmp, path)
    })();
    if let Err(e) = result {
        let _ = std::fs::remove_file(&tmp);
        return Err(io("cannot write", e));
    }
    Ok(())
}

/// Serialises `value` as pretty JSON (with a trailing newline) and writes it atomically.
pub fn atomic_write_json<T: serde::Serialize>(path: &Path, value: &T) -> Result<(), ToolError> {
    let mut bytes = serde_json::to_vec_pretty(value)
        .map_err(|e| ToolError::Runtime(format!("cannot serialise {}: {e}", path.display())))?;
    bytes.push(b'\n');
    atomic_write(path, &bytes)
}

/// SHA-256 of a file's bytes, as lowercase hex (for provenance).
pub fn file_sha256(path: &Path) -> Result<String, ToolError> {
    let bytes = std::fs::read(path)
        .map_err(|e| ToolError::BadInput(format!("cannot read {}: {e}", path.display())))?;
    Ok(hex::encode(Sha256::digest(&bytes)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn writes_whole_file_and_leaves_no_temp() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("sub").join("x.json");
        atomic_write_json(&path, &serde_json::json!({"a": 1})).unwrap();
        let text = std::fs::read_to_string(&path).unwrap();
        assert_eq!(text, "{\n  \"a\": 1\n}\n");
        let names: Vec<_> = std::fs::read_dir(path.parent().unwrap())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names.len(), 1);
    }

    #[test]
    fn failed_write_reports_the_path() {
        let dir = tempfile::tempdir().unwrap();
        // A directory where the file should be: rename fails.
        let path = dir.path().join("taken");
        std::fs::create_dir(&path).unwrap();
        std::fs::write(path.join("f"), b"x").unwrap();
        let err = atomic_write(&path, b"x").unwrap_err().to_string();
        assert!(err.contains("taken"), "{err}");
        let leftovers = std::fs::read_dir(dir.path()).unwrap().count();
        assert_eq!(leftovers, 1);
    }

    #[test]
    fn sha256_of_known_bytes() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("abc");
        std::fs::write(&path, b"abc").unwrap();
        assert_eq!(
            file_sha256(&path).unwrap(),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
    }
}
