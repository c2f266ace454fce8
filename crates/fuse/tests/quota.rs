//! Disk quotas through the mount: a user's `dd` that goes past its quota of blocks gets
//! "Disk quota exceeded" (EDQUOT), while another user still writes; and at root's reserve users
//! get "No space left on device" while root still writes. (Run as root; the users' programs run under `setpriv`.)

mod common;

use common::Mounted;
use std::fs;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::process::{Command, Output};
use vino_kernel::KernelConfig;
use vino_kernel::storage::{MountOptions, Quota};

const ALICE: u32 = 1000;
const BOB: u32 = 1001;
/// Each user's quota: 4 MiB of blocks.
const QUOTA_BLOCKS: u64 = 1024;

/// Runs `script` with `sh` as `uid`.
fn sh_as(uid: u32, script: &str) -> Output {
    Command::new("setpriv")
        .args([
            format!("--reuid={uid}"),
            format!("--regid={uid}"),
            "--clear-groups".into(),
        ])
        .args(["sh", "-c", script])
        .output()
        .expect("setpriv (util-linux) runs programs as other users")
}

fn mounted(quota: Quota) -> Mounted {
    let kernel = KernelConfig {
        mount: MountOptions {
            quota,
            ..MountOptions::default()
        },
        ..KernelConfig::default()
    };
    Mounted::for_all(&kernel)
}

/// `/alice` and `/bob`, each user's own.
fn home_dirs(m: &Mounted) {
    for (name, uid) in [("alice", ALICE), ("bob", BOB)] {
        let d = m.mnt().join(name);
        fs::create_dir(&d).unwrap();
        std::os::unix::fs::chown(&d, Some(uid), Some(uid)).unwrap();
        fs::set_permissions(&d, fs::Permissions::from_mode(0o755)).unwrap();
    }
}

#[test]
fn a_user_past_its_quota_gets_edquot_while_another_still_writes() {
    let m = mounted(Quota {
        user_blocks: Some(QUOTA_BLOCKS),
        ..Quota::default()
    });
    let mnt = m.mnt();
    home_dirs(&m);
    // 8 MiB asked, 4 MiB allowed: dd stops with EDQUOT (at a write, or at the flush on close).
    let big = mnt.join("alice/big");
    let out = sh_as(
        ALICE,
        &format!("dd if=/dev/zero of={} bs=64k count=128 conv=fsync", big.display()),
    );
    assert!(!out.status.success(), "dd past the quota succeeded: {out:?}");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("Disk quota exceeded"), "dd: {err}");
    let held = fs::metadata(&big).unwrap();
    assert_eq!(held.uid(), ALICE);
    assert!(held.len() <= QUOTA_BLOCKS * 4096, "{} bytes written", held.len());
    let usage = m.kernel.quota_usage(ALICE);
    assert!(usage.blocks <= QUOTA_BLOCKS, "{usage:?}");
    assert!(usage.blocks >= QUOTA_BLOCKS - 16, "{usage:?}");
    // Even a small new file of hers is refused now (dd says why: a shell's echo says EIO
    // whatever the error).
    let out = sh_as(
        ALICE,
        &format!("dd if=/dev/zero of={}/alice/small bs=5 count=1", mnt.display()),
    );
    assert!(!out.status.success(), "{out:?}");
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("Disk quota exceeded"),
        "{out:?}"
    );

    // Bob has his own quota.
    let out = sh_as(
        BOB,
        &format!("dd if=/dev/zero of={}/bob/f bs=64k count=32 conv=fsync", mnt.display()),
    );
    assert!(out.status.success(), "{out:?}");
    assert_eq!(fs::metadata(mnt.join("bob/f")).unwrap().len(), 2 << 20);

    // Freeing gives Alice room again.
    let out = sh_as(
        ALICE,
        &format!(
            "rm {big} && dd if=/dev/zero of={big} bs=64k count=8 conv=fsync",
            big = big.display()
        ),
    );
    assert!(out.status.success(), "{out:?}");
    m.finish();
}

#[test]
fn users_get_enospc_at_roots_reserve_while_root_still_writes() {
    // Half the disk is root's; users have no quota, so Alice alone reaches the reserve.
    let m = mounted(Quota {
        user_blocks: Some(vino_kernel::storage::UNLIMITED),
        user_inodes: Some(vino_kernel::storage::UNLIMITED),
        root_reserve_percent: 50,
        user_links: None,
    });
    let mnt = m.mnt();
    home_dirs(&m);
    let out = sh_as(
        ALICE,
        &format!(
            "dd if=/dev/zero of={}/alice/big bs=1M count=128 conv=fsync",
            mnt.display()
        ),
    );
    assert!(!out.status.success(), "dd past the reserve succeeded: {out:?}");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("No space left on device"), "dd: {err}");
    let s = m.kernel.fs_stats();
    assert!(
        s.free_blocks >= s.reserved_blocks && s.free_blocks <= s.reserved_blocks + 16,
        "{s:?}"
    );
    let out = sh_as(
        BOB,
        &format!("dd if=/dev/zero of={}/bob/f bs=64k count=1 conv=fsync", mnt.display()),
    );
    assert!(!out.status.success(), "{out:?}");
    // Root writes into the reserve.
    fs::write(mnt.join("root-file"), vec![1u8; 4 << 20]).unwrap();
    assert_eq!(fs::metadata(mnt.join("root-file")).unwrap().len(), 4 << 20);
    m.finish();
}

#[test]
fn names_in_roots_tmp_stop_at_the_link_quota_and_others_files_cannot_be_pinned() {
    let m = mounted(Quota {
        user_links: Some(100),
        ..Quota::default()
    });
    let mnt = m.mnt();
    home_dirs(&m);
    let tmp = mnt.join("tmp");
    fs::create_dir(&tmp).unwrap();
    fs::set_permissions(&tmp, fs::Permissions::from_mode(0o1777)).unwrap();
    // protected_hardlinks: Bob cannot give Alice's private file a name of his.
    let out = sh_as(
        ALICE,
        &format!("echo s > {0}/alice/secret && chmod 600 {0}/alice/secret", mnt.display()),
    );
    assert!(out.status.success(), "{out:?}");
    let out = sh_as(BOB, &format!("ln {0}/alice/secret {0}/tmp/pin", mnt.display()));
    assert!(!out.status.success(), "{out:?}");
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("Operation not permitted"),
        "{out:?}"
    );
    // Link-fill: 100 names beyond the first, then EDQUOT.
    let script = format!(
        "cd {}/tmp && : > seed && i=0 && while ln seed $(printf 'n%0250d' $i); do i=$((i+1)); done; echo $i",
        mnt.display()
    );
    let out = sh_as(BOB, &script);
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "100", "{out:?}");
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("Disk quota exceeded"),
        "{out:?}"
    );
    // Alice and root still make files there.
    let out = sh_as(ALICE, &format!("echo a > {}/tmp/alice", mnt.display()));
    assert!(out.status.success(), "{out:?}");
    fs::write(tmp.join("root"), b"root's").unwrap();
    m.finish();
}
