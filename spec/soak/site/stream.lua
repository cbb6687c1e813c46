-- /stream?n=N&size=S: N chunks of S bytes (default 8 of 1 KiB), chunked.
local piece = {}

return function(req, resp)
    local n = tonumber(req.query.n) or 8
    local size = tonumber(req.query.size) or 1024
    piece[size] = piece[size] or string.rep("s", size)
    resp.headers["X-Kind"] = "stream"
    for _ = 1, n do
        assert(resp:write(piece[size]))
    end
end
