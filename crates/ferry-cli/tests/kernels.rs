//! `ferry run --kernels LIB.so`: the template kernel library built with cargo, bad libraries
//! refused with the loader's typed message, and the runner running afterwards.
#[path = "../../ferry-runtime/tests/support/template.rs"]
mod template;

use std::process::{Command, Output};

fn ferry(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_ferry")).args(args).output().unwrap()
}

fn text(o: &Output) -> String {
    format!("{}\n{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr))
}

#[test]
fn run_loads_kernel_libraries_and_refuses_bad_ones() {
    let lib = template::template_lib();
    let good = std::fs::read(lib).unwrap();
    let dir = std::env::temp_dir().join(format!("ferry-cli-kernels-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let truncated = dir.join("truncated.so");
    std::fs::write(&truncated, &good[..good.len() / 2]).unwrap();
    let mut v2 = good.clone();
    let magic = u64::from_le_bytes(*b"FRYKERNL").to_le_bytes();
    let at = v2.windows(12).position(|w| w[..8] == magic && w[8..] == 1u32.to_le_bytes()).unwrap();
    v2[at + 8..at + 12].copy_from_slice(&2u32.to_le_bytes());
    let wrong_abi = dir.join("abi2.so");
    std::fs::write(&wrong_abi, &v2).unwrap();
    let run = ["run", "--small", "--aic", "2", "--aiv", "4", "--example", "vector", "--kernels"];

    let o = ferry(&[&run[..], &[truncated.to_str().unwrap()]].concat());
    assert!(!o.status.success(), "{}", text(&o));
    assert!(text(&o).contains("truncated"), "{}", text(&o));
    let o = ferry(&[&run[..], &[wrong_abi.to_str().unwrap()]].concat());
    assert!(!o.status.success(), "{}", text(&o));
    assert!(text(&o).contains("kernel abi version 2, this ferry loads version 1"), "{}", text(&o));
    let o = ferry(&[&run[..], &[&format!("{},{}", lib.display(), lib.display())]].concat());
    assert!(!o.status.success(), "{}", text(&o));
    assert!(
        text(&o).contains("`saxpy` is already defined by library `kernel-template`"),
        "{}",
        text(&o)
    );

    // A good one loads and the example still verifies.
    let o = ferry(&[&run[..], &[lib.to_str().unwrap()]].concat());
    assert!(o.status.success(), "{}", text(&o));
    let t = text(&o);
    assert!(t.contains("kernel-template from"), "{t}");
    assert!(t.contains("saxpy (id 256), clamp (id 257)"), "{t}");
    assert_eq!(t.matches("ok (checksum").count(), 1, "{t}");
    let _ = std::fs::remove_dir_all(&dir);
}
