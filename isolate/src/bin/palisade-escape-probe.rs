//! `palisade-escape-probe ATTEMPT [ARGS…]`: performs one escape attempt and
//! prints `ok …` or `err <errno>`. Used by the escape-suite tests inside and
//! outside sandboxes (the positive control); not meant for end users.

#![forbid(unsafe_code)]
#![expect(clippy::print_stdout, reason = "the probe answers on stdout")]

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    println!("{}", palisade_isolate::__escape::run(&args));
}
