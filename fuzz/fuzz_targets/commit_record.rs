//! Fuzz target: `sheafdb::fuzzing::commit_record` (see its docs for what it runs).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    sheafdb::fuzzing::commit_record(data);
});
