//! Builds memtrial's spawner (spawner/spawn.c) as a small static executable that the
//! binary embeds. Without a C compiler memtrial still builds and runs: it then spawns
//! workloads through itself, whose larger start-up image can show in the peak of a
//! very small program (see src/backend/spawn.rs).

use std::path::PathBuf;
use std::process::Command;

fn main() {
    println!("cargo:rerun-if-changed=spawner/spawn.c");
    println!("cargo:rerun-if-changed=probe-shim/shim.c");
    println!("cargo:rustc-check-cfg=cfg(memtrial_c_spawner)");
    println!("cargo:rustc-check-cfg=cfg(memtrial_probe_shim)");
    let out = PathBuf::from(std::env::var_os("OUT_DIR").expect("cargo sets OUT_DIR"));
    build_probe_shim(&out);
    build_spawner(&out);
}

/// The allocator probe (probe-shim/shim.c): a shared library memtrial embeds and
/// preloads into a run's processes. Without it memtrial runs without the allocator probe.
fn build_probe_shim(out: &std::path::Path) {
    let lib = out.join("libmemtrial-probe.so");
    let compiler = cc::Build::new().opt_level(2).get_compiler();
    let mut cmd = compiler.to_command();
    // One read-execute segment instead of three: fewer pages of the probe in a small
    // program's RSS.
    cmd.args(["-shared", "-fPIC", "-O2", "-pthread", "-Wall"])
        .arg("-Wl,-z,noseparate-code")
        .arg("-o")
        .arg(&lib)
        .arg("probe-shim/shim.c")
        .arg("-ldl");
    if Command::status(&mut cmd).is_ok_and(|s| s.success()) {
        println!("cargo:rustc-cfg=memtrial_probe_shim");
    } else {
        println!(
            "cargo:warning=no C compiler could build probe-shim/shim.c: memtrial runs \
             without its allocator probe (install gcc and libc6-dev)"
        );
    }
}

fn build_spawner(out: &std::path::Path) {
    let exe = out.join("memtrial-spawn");
    let compiler = cc::Build::new().opt_level(2).get_compiler();
    // Static first (no loader, fewest private pages); dynamic if libc.a is missing.
    for extra in [&["-static"][..], &[][..]] {
        let mut cmd = compiler.to_command();
        cmd.args(extra)
            .arg("-Os")
            .arg("-o")
            .arg(&exe)
            .arg("spawner/spawn.c");
        if Command::status(&mut cmd).is_ok_and(|s| s.success()) {
            println!("cargo:rustc-cfg=memtrial_c_spawner");
            return;
        }
    }
    println!(
        "cargo:warning=no C compiler could build spawner/spawn.c: memtrial spawns workloads \
         through itself (install gcc and libc6-dev for exact peaks of very small programs)"
    );
}
