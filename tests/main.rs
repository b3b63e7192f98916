#[test] fn smoke() { assert_eq!(1 + 1, 2); }
