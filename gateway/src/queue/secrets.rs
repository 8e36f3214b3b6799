//! The waiting room's secrets that must outlive the process: made once,
//! kept in `data_dir` (mode 0600), read again at every start.
//!
//! - `ticket-signing.key`: the HS256 key tickets and passes are signed with
//!   when the config lists no `[[keys]]` (with keys listed, it is unused);
//! - `ticket-id.key`: the key ticket ids and fair-start seeds derive from
//!   (see `sluice_admission::ticket_id`);
//! - `account-hash.key` ([`super::enqueue::ACCOUNT_KEY_FILE`]): the key of
//!   the account hash, when `[cluster] account_hash_key_env` names none.
//!
//! Each is 32 random bytes written as base64url. A file that is there but
//! is not such a key stops the start with a message naming it: making a new
//! one silently would turn every ticket and pass out there invalid.

use std::fs::{self, OpenOptions};
use std::io::Write;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use rand::RngCore;

pub const SIGNING_KEY_FILE: &str = "ticket-signing.key";
pub const TICKET_ID_KEY_FILE: &str = "ticket-id.key";
/// Owner read/write only.
const KEY_FILE_MODE: u32 = 0o600;
/// Longest key file read: a key is 43 characters and a newline.
const KEY_FILE_BYTES_MAX: u64 = 256;

/// The 32-byte key in `data_dir/name`, made (from the OS RNG) if absent.
pub fn load_or_create(data_dir: &Path, name: &str) -> Result<[u8; 32], String> {
    let path = data_dir.join(name);
    match fs::metadata(&path) {
        Ok(meta) => read_key(&path, meta),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => create_key(data_dir, &path),
        Err(e) => Err(format!("reading {}: {e}", path.display())),
    }
}

fn read_key(path: &Path, meta: fs::Metadata) -> Result<[u8; 32], String> {
    let shown = path.display();
    if meta.len() > KEY_FILE_BYTES_MAX {
        return Err(format!("{shown} is not a key Sluice wrote (too long)"));
    }
    if meta.permissions().mode() & 0o077 != 0 {
        return Err(format!(
            "{shown} can be read by others than its owner; `chmod 600` it (and consider it leaked)"
        ));
    }
    let text = fs::read_to_string(path).map_err(|e| format!("reading {shown}: {e}"))?;
    let bytes = URL_SAFE_NO_PAD
        .decode(text.trim().trim_end_matches('='))
        .ok()
        .filter(|b| b.len() == 32)
        .ok_or_else(|| {
            format!(
                "{shown} is not a key Sluice wrote (32 bytes, base64url); move it away to have a new one made, which ends every ticket and pass signed or derived with it"
            )
        })?;
    let mut key = [0u8; 32];
    key.copy_from_slice(&bytes);
    Ok(key)
}

/// Writes a fresh key beside its final name, syncs it and renames it into
/// place, so a crash leaves either no key or a whole one.
fn create_key(data_dir: &Path, path: &Path) -> Result<[u8; 32], String> {
    let mut key = [0u8; 32];
    rand::rng().fill_bytes(&mut key);
    let tmp: PathBuf = path.with_extension("key.tmp");
    let write = || -> std::io::Result<()> {
        let mut file = OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(KEY_FILE_MODE)
            .open(&tmp)?;
        // `mode` applies only to a file this call created.
        file.set_permissions(fs::Permissions::from_mode(KEY_FILE_MODE))?;
        file.write_all(format!("{}\n", URL_SAFE_NO_PAD.encode(key)).as_bytes())?;
        file.sync_all()?;
        fs::rename(&tmp, path)?;
        fs::File::open(data_dir)?.sync_all()
    };
    write().map_err(|e| format!("writing {}: {e}", path.display()))?;
    Ok(key)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_key_is_made_once_kept_private_and_refused_when_damaged() {
        let dir = tempfile::tempdir().unwrap();
        let first = load_or_create(dir.path(), TICKET_ID_KEY_FILE).unwrap();
        let path = dir.path().join(TICKET_ID_KEY_FILE);
        let mode = fs::metadata(&path).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
        assert_eq!(
            load_or_create(dir.path(), TICKET_ID_KEY_FILE).unwrap(),
            first
        );
        assert_ne!(
            load_or_create(dir.path(), SIGNING_KEY_FILE).unwrap(),
            first,
            "each secret is its own"
        );
        fs::write(&path, "not a key\n").unwrap();
        let err = load_or_create(dir.path(), TICKET_ID_KEY_FILE).unwrap_err();
        assert!(err.contains("is not a key"), "{err}");
        fs::set_permissions(&path, fs::Permissions::from_mode(0o644)).unwrap();
        let err = load_or_create(dir.path(), TICKET_ID_KEY_FILE).unwrap_err();
        assert!(err.contains("chmod 600"), "{err}");
    }
}
