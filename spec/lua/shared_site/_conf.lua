-- The site of shared_spec.lua under `moonflow serve --config _conf.lua`
-- (run_specs.py serves a copy of this folder: the spec rewrites a module to
-- reload it). Two workers share the dicts.
return {
    root = ".",
    workers = 2,
    shared = { hits = 1048576, kept = 65536 },
}
