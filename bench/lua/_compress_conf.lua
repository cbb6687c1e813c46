-- The Lua hello with response compression configured, for the cost of the
-- check on answers it does not compress (http/instructions.py --server lua
-- --config bench/lua/_compress_conf.lua, against no --config): the hello's
-- 16 bytes are under min_length; with MF_BENCH_BODY_SIZE=2048 its
-- text/plain body qualifies, and wrk's requests, which send no
-- Accept-Encoding, are answered uncompressed with Vary: Accept-Encoding.
return {
    root = ".", access_log = "off",
    compress = { min_length = 1024 },
}
