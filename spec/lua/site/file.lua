-- resp:file: this script answered as a file of the site (ranges and 304s
-- as the client asks), and resp:file's argument errors, each named (the
-- answer is still free after them).
return function(req, resp)
    if req.query.case == "args" then
        local function try(...)
            local ok, err = pcall(resp.file, resp, ...)
            return tostring(ok) .. " " .. tostring(err)
        end
        resp:send(table.concat({
            try(nil),
            try(""),
            try("a\0b"),
            try("file.lua", "x"),
            try("file.lua", { bogus = 1 }),
            try("file.lua", { type = 1 }),
            try("file.lua", { root = "/none" }),
        }, "\n"))
        return
    end
    local status = resp:file(req.query.p or "file.lua",
                             { type = "text/x-lua" })
    assert(status == tonumber(req.query.want or status))
end
