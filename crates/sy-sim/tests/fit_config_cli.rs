//! `sy-sim fit-config` as a user runs it: a fitted configuration written from records, and bad
//! input refused with exit code 2, a message naming the file and the field or model, and no output.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::path::Path;
use std::process::{Command, Output};

use sy_records::synth::{SynthSpec, generate};

fn fit(records: &Path, base: &Path, out: &Path) -> Output {
    Command::new(env!("CARGO_BIN_EXE_sy-sim"))
        .arg("fit-config")
        .arg("--records")
        .arg(records)
        .arg("--base")
        .arg(base)
        .arg("--out")
        .arg(out)
        .output()
        .unwrap()
}

fn text(o: &Output) -> (String, String) {
    (
        String::from_utf8_lossy(&o.stdout).into_owned(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}

#[test]
fn fits_from_records_and_refuses_bad_input_naming_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let records = dir.path().join("records.jsonl");
    sy_records::write_jsonl(&generate(&SynthSpec::default()), &records).unwrap();
    let out = dir.path().join("fitted.toml");

    // The default base has no models named like the generator's: refused, both files named.
    let base = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../data/sim/default.toml");
    let o = fit(&records, &base, &out);
    let (_, err) = text(&o);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(
        err.contains("records.jsonl")
            && err.contains("capable-model")
            && err.contains("default.toml"),
        "{err}"
    );
    assert!(!out.exists(), "no output on bad input");

    // A base with the generator's model names: fitted (to the client TTFT: no server timing).
    let mut cfg = sy_sim::SimConfig::default();
    cfg.models[0].name = "efficient-model".into();
    cfg.models[1].name = "capable-model".into();
    let named = dir.path().join("base.toml");
    std::fs::write(&named, toml::to_string(&cfg).unwrap()).unwrap();
    let o = fit(&records, &named, &out);
    let (stdout, err) = text(&o);
    assert!(o.status.success(), "{err}");
    assert!(stdout.contains("fitted to ttft_ms medians"), "{stdout}");
    let fitted = sy_sim::SimConfig::from_toml_path(&out).unwrap();
    assert_eq!(fitted.models.len(), 2);
    // The capacities the records published replace the base's.
    let recs = generate(&SynthSpec::default());
    let published = recs
        .iter()
        .find(|r| r.model == "efficient-model")
        .and_then(|r| r.observed.kv_capacity_blocks)
        .unwrap();
    assert_ne!(published, cfg.models[0].kv_blocks);
    assert_eq!(fitted.models[0].kv_blocks, published);
    assert!(stdout.contains("published by the deployment"), "{stdout}");

    // A base that does not parse: its file and field are named.
    let bad = dir.path().join("bad.toml");
    std::fs::write(&bad, "[[models]]\nname = \"a\"\nbogus = 1\n").unwrap();
    let out2 = dir.path().join("never.toml");
    let o = fit(&records, &bad, &out2);
    let (_, err) = text(&o);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(err.contains("bad.toml") && err.contains("bogus"), "{err}");
    assert!(!out2.exists());
}
