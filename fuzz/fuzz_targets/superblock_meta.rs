//! Fuzz target: `sheafdb::fuzzing::superblock_and_meta` (see its docs for what it runs).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    sheafdb::fuzzing::superblock_and_meta(data);
});
