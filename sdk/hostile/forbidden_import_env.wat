;; forbidden_import_env.wat -- tests the import check for modules other than "vino": imports
;; env.abort (what a careless libc build pulls in). The kernel must refuse the module at load.
;; Written in WAT because the C header only imports from "vino".
(module
  (import "env" "abort" (func $abort))
  (memory (export "memory") 2)
  (func (export "toy_apply") (param $arg i64) (result i64)
    call $abort
    local.get $arg))
