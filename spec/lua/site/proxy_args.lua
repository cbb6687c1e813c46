-- resp:proxy's argument errors, each named; the answer is still free
-- after them (none started a forward).
return function(req, resp)
    local function try(...)
        local ok, err = pcall(resp.proxy, resp, ...)
        return tostring(ok) .. " " .. tostring(err)
    end
    local out = {
        try(nil),
        try("ftp://127.0.0.1/"),
        try("http://127.0.0.1:1", "fast"),
        try("http://127.0.0.1:1", { retries = 2 }),
        try("http://127.0.0.1:1", { timeout = "5s" }),
        try("http://127.0.0.1:1", { timeout = -1 }),
        try("http://127.0.0.1:1", { tries = 0 }),
        try("http://127.0.0.1:1", { via = 1 }),
        try("http://127.0.0.1:1", { headers = { ["bad name"] = "x" } }),
        try("http://127.0.0.1:1", { headers = { ["X-A"] = "a\r\nb" } }),
        try("http://127.0.0.1:1", { headers = { ["X-A"] = true } }),
    }
    resp:send(table.concat(out, "\n"))
end
