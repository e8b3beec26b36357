//! Fuzz target: `sheafdb::fuzzing::page_tree` (see its docs for what it runs).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    sheafdb::fuzzing::page_tree(data);
});
