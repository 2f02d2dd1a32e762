use std::path::PathBuf;

#[test]
fn dump() {
    let text = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/data/sample.yaml"
    ))
    .unwrap();
    let t = std::time::Instant::now();
    let d = hetgen_kube::validate::check(&[(PathBuf::from("sample.yaml"), text)]);
    eprintln!("took {:?}", t.elapsed());
    for x in &d {
        eprintln!(
            "{}: [{}] {} ({:?}) path={}",
            x.location(),
            x.code,
            x.message,
            x.hint,
            x.path
        );
    }
}
