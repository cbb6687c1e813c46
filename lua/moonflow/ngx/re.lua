-- moonflow.ngx.re — ngx.re.* over mf.re with OpenResty's arguments and
-- answers: a ctx table ({pos = n}, 1-based, moved past the match) where
-- mf.re takes a start index, a res table to fill, errors as values
-- (match: nil, err; find: nil, nil, err; sub/gsub: nil, nil, err;
-- gmatch: nil, err at the call and at the iterator), the options of
-- OpenResty ("U" is mf.re's "u"; "d" and "J", which only change the
-- engine, are left out), and resty.core's ngx.re.split.
local re = require("moonflow").re
local pcall, type, error = pcall, type, error

local function options(opts)
    if opts == nil or opts == "" then return opts end
    if type(opts) ~= "string" then error("ngx.re: options must be a string", 3) end
    return (opts:gsub("U", "u"):gsub("[dJ]", ""))
end

local function start_of(ctx)
    if ctx == nil then return nil end
    if type(ctx) ~= "table" then error("ngx.re: ctx must be a table", 3) end
    return ctx.pos
end

local M = {}

function M.match(s, regex, opts, ctx, res)
    opts = options(opts)
    local init = start_of(ctx)
    local m, err = re.match(s, regex, opts, init)
    if not m then return nil, err end
    if ctx then
        local _, to = re.find(s, regex, opts, init)
        ctx.pos = to + 1
    end
    if res then
        for k in pairs(res) do res[k] = nil end
        for k, v in pairs(m) do res[k] = v end
        return res
    end
    return m
end

function M.find(s, regex, opts, ctx, nth)
    opts = options(opts)
    local init = start_of(ctx)
    local from, to = re.find(s, regex, opts, init, nth)
    if not from then return nil, nil, to end
    if ctx then
        if nth and nth ~= 0 then
            local _, whole_to = re.find(s, regex, opts, init)
            ctx.pos = whole_to + 1
        else
            ctx.pos = to + 1
        end
    end
    return from, to
end

function M.gmatch(s, regex, opts)
    opts = options(opts)
    local _, _, err = M.find("", regex, opts) -- a regex that does not compile
    if err then return nil, err end
    local ok, it = pcall(re.gmatch, s, regex, opts)
    if not ok then return nil, it end
    return function()
        local ok2, m = pcall(it)
        if not ok2 then return nil, m end
        return m
    end
end

function M.sub(s, regex, repl, opts)
    local out, n = re.sub(s, regex, repl, options(opts))
    if not out then return nil, nil, n end
    return out, n
end

function M.gsub(s, regex, repl, opts)
    local out, n = re.gsub(s, regex, repl, options(opts))
    if not out then return nil, nil, n end
    return out, n
end

-- resty.core's ngx.re.split(subject, regex, opts, ctx, max, res): the
-- pieces between the matches (the first capture of a regex with groups
-- is added after its piece, as OpenResty does), at most max pieces (the last one holding the
-- rest); an empty regex splits into single characters. Trailing empty
-- pieces are left out (Perl's split).
function M.split(s, regex, opts, ctx, max, res)
    if type(s) ~= "string" then error("ngx.re.split: a string subject expected", 2) end
    opts = options(opts)
    max = max or 0
    res = res or {}
    for k in pairs(res) do res[k] = nil end
    local n, pos, len = 0, start_of(ctx) or 1, #s
    local piece_start = pos
    if regex == "" then
        while pos <= len and (max <= 0 or n < max - 1) do
            n = n + 1
            res[n] = s:sub(pos, pos)
            pos = pos + 1
        end
        if pos <= len then n = n + 1; res[n] = s:sub(pos) end
        return res
    end
    while pos <= len + 1 and (max <= 0 or n < max - 1) do
        local m, err = re.match(s, regex, opts, pos)
        if err then return nil, err end
        if not m then break end
        local from, to = re.find(s, regex, opts, pos)
        if to < from then -- an empty match: split after one character
            if from > len then break end
            to = from
            from = from + 1
            if from - 1 < piece_start then break end
            n = n + 1
            res[n] = s:sub(piece_start, from - 1)
            piece_start = from
            pos = from
        else
            n = n + 1
            res[n] = s:sub(piece_start, from - 1)
            if m[1] then n = n + 1; res[n] = m[1] end
            piece_start = to + 1
            pos = to + 1
        end
    end
    if piece_start <= len or n == 0 then
        n = n + 1
        res[n] = s:sub(piece_start)
    end
    while n > 0 and res[n] == "" do res[n] = nil; n = n - 1 end
    return res
end

return M
