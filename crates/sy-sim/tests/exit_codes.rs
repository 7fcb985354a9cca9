//! The `sy-sim` binary follows the README's exit codes: a bad configuration or flag value is
//! bad input (2), a runtime failure such as a port already in use is 1.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::process::Command;

fn sy_sim() -> Command {
    Command::new(env!("CARGO_BIN_EXE_sy-sim"))
}

#[test]
fn bad_config_file_and_bad_flag_values_exit_2() {
    let dir = tempfile::tempdir().unwrap();
    let bad = dir.path().join("sim.toml");
    std::fs::write(&bad, "time_scale = \"fast\"\n").unwrap();
    let out = sy_sim()
        .args(["serve", "--config"])
        .arg(&bad)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("sim.toml"), "names the file: {stderr}");

    let missing = dir.path().join("absent.toml");
    let out = sy_sim()
        .args(["serve", "--config"])
        .arg(&missing)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "{out:?}");

    let out = sy_sim()
        .args(["serve", "--error-rate", "7"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "{out:?}");

    let out = sy_sim()
        .args(["serve", "--port", "not-a-port"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "{out:?}");
}

#[test]
fn port_in_use_exits_1() {
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = taken.local_addr().unwrap().port().to_string();
    let out = sy_sim()
        .args(["serve", "--time-scale", "0", "--port", &port])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    drop(taken);
}

#[test]
fn default_config_exits_0() {
    let out = sy_sim().arg("default-config").output().unwrap();
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    assert!(String::from_utf8_lossy(&out.stdout).contains("time_scale"));
}
