-- The Lua hello of bench/: the same body as every peer (MF_BENCH_BODY_SIZE
-- bytes of "0123456789abcdef" repeated), built once at load.
local n = tonumber(os.getenv("MF_BENCH_BODY_SIZE")) or 16
local body = ("0123456789abcdef"):rep(math.ceil(n / 16)):sub(1, n)

return function(req, resp)
    resp:send(body)
end
