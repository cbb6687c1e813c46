-- moonflow.ffi_guard — ffi.cdef and ffi.metatype that may run again, as a
-- hot reload runs a module's top level again in the same Lua state (whose
-- C declarations live as long as the state). The host requires it when it
-- makes a state; it replaces the two functions in the state's ffi table.
--
-- ffi.cdef(text) applies each top-level declaration of text (split at the
-- semicolons outside braces and parentheses) once: a declaration seen
-- before, spelled the same (comments and spacing aside), is skipped; one
-- that declares a name again otherwise (a struct, union or enum tag, an
-- enum constant, a typedef, function or variable name) is not applied
-- either: the first declaration wins, the code compiled against it keeps
-- working, and the change is logged once with the file and line of the
-- ffi.cdef call. Any other error raises as before, its "at line N"
-- counted in the whole text. A text with preprocessor lines (#pragma
-- pack) is applied whole, as LuaJIT keeps their state for one call only.
--
-- ffi.metatype(ct, mt) on a type that has one already: LuaJIT allows one
-- metatable per type, and only its __index table may change afterwards.
-- A new metatable with the same fields refreshes the first one's __index
-- table in place (a reloaded module's methods take over); other changes
-- are logged once and the first metatable stays.
local ffi = require "ffi"

local raw_cdef, raw_metatype, typeof = ffi.cdef, ffi.metatype, ffi.typeof
local type, pcall, error, tonumber, tostring = type, pcall, error, tonumber, tostring
local select = select
local pairs, ipairs = pairs, ipairs
local getinfo = debug.getinfo

local applied = {}  -- a declaration's normal form → true
local reported = {} -- what was logged already → true
local metatables = {} -- ctype id → the metatable it was given

local function log_once(key, where, what)
    if reported[key] then return end
    reported[key] = true
    require("moonflow.log").log("warn", where .. ": " .. what)
end

-- "file:line" of the function running level calls above caller's caller
-- (1: that caller's own caller), its line moved by shift.
local function caller(level, shift)
    local info = getinfo(level + 2, "Sl")
    if not info then return "?" end
    local line = info.currentline + (shift or 0)
    if line < 1 then line = info.currentline end
    return info.short_src .. ":" .. line
end

-- Comments out (newlines kept: lines still count).
local function strip_comments(text)
    text = text:gsub("/%*.-%*/", function(c) return (c:gsub("[^\n]", "")) end)
    return (text:gsub("//[^\n]*", ""))
end

-- The declaration as compared: no spacing but between two words.
local function normal(decl)
    decl = decl:gsub("%s+", " ")
    decl = decl:gsub(" ?([^%w_ ]) ?", "%1")
    return (decl:gsub("^ ", ""):gsub(" $", ""))
end

-- The top-level declarations of text, each with the line it starts on
-- (0-based) in text.
local function declarations(text)
    local out, depth, start, line, start_line = {}, 0, 1, 0, 0
    for i = 1, #text do
        local c = text:byte(i)
        if c == 10 then
            line = line + 1
        elseif c == 123 or c == 40 then -- { (
            depth = depth + 1
        elseif c == 125 or c == 41 then -- } )
            depth = depth - 1
        elseif c == 59 and depth == 0 then -- ;
            out[#out + 1] = { text:sub(start, i), start_line }
            start, start_line = i + 1, line
        end
        if start == i and (c == 10 or c == 32 or c == 9) then
            start, start_line = i + 1, line -- leading space: not the start
        end
    end
    local rest = text:sub(start)
    if rest:find("%S") then out[#out + 1] = { rest, start_line } end
    return out
end

-- LuaJIT's "at line N" of a declaration (which it leaves out for line
-- 1), counted in the caller's text.
local function shift_line(err, by)
    if type(err) ~= "string" then return err end
    local n = tonumber(err:match(" at line (%d+)$"))
    if n then return err:sub(1, -#tostring(n) - 1) .. (n + by) end
    if by == 0 then return err end
    return err .. " at line " .. (by + 1)
end

-- ---- the names a declaration declares -----------------------------------
--
-- LuaJIT refuses a second struct, union or enum body and a second enum
-- constant of a name ("attempt to redefine"), but keeps the first typedef
-- and function of a name without a word: either way a changed declaration
-- would go unapplied, so the names are tracked here. Best effort on the
-- declaration's normal form; a name it misses still meets LuaJIT's check.

-- The declarator of one piece of a declaration ("*p", "f(int)", "(*cb)(x)",
-- "a[4]", "x=5"): its name.
local function declarator_name(piece)
    piece = piece:gsub("=.*$", "")
    repeat
        local before = piece
        piece = piece:gsub("%b[]$", "")
    until piece == before
    local head = piece:match("^(.-)%b()$")
    if head then
        if head:sub(-1) == ")" then -- a pointer to a function: (*name)
            return head:match("%(%*+([%a_][%w_]*)%)$")
        end
        piece = head -- a function: name(params)
    end
    return piece:match("([%a_][%w_]*)$")
end

-- The pieces of s between the commas outside parentheses.
local function split_commas(s)
    local out, depth, start = {}, 0, 1
    for i = 1, #s do
        local c = s:sub(i, i)
        if c == "(" or c == "[" then depth = depth + 1
        elseif c == ")" or c == "]" then depth = depth - 1
        elseif c == "," and depth == 0 then
            out[#out + 1] = s:sub(start, i - 1)
            start = i + 1
        end
    end
    out[#out + 1] = s:sub(start)
    return out
end

-- The names key (a normal form) declares: "struct tag" for a body, its
-- enum constants, and the typedef, function or variable names.
local KINDS = { "struct", "union", "enum" }

local function names_of(key)
    local names = {}
    key = key:gsub(";$", ""):gsub("__attribute__%b()", ""):gsub("__asm__%b()", "")
    for _, kind in ipairs(KINDS) do
        for tag, body in key:gmatch("%f[%w_]" .. kind .. " ?([%w_]*)(%b{})") do
            if tag ~= "" then names[#names + 1] = kind .. " " .. tag end
            if kind == "enum" then
                for item in body:sub(2, -2):gmatch("[^,]+") do
                    names[#names + 1] = item:match("^ ?([%a_][%w_]*)")
                end
            end
        end
    end
    local flat = key:gsub("%b{}", "{}")
    for _, kind in ipairs(KINDS) do
        flat = flat:gsub("%f[%w_]" .. kind .. " ?[%w_]*{}", "")
        if flat:find("^" .. kind .. " [%w_]+$") then
            return names -- "struct tag": a forward declaration
        end
    end
    local typedef = flat:match("^typedef (.*)$")
    for _, piece in ipairs(split_commas(typedef or flat)) do
        names[#names + 1] = declarator_name(piece)
    end
    return names
end

local declared = {} -- a name → the normal form of its declaration

local function changed(key, name, shift)
    log_once(key, caller(3, shift), "ffi.cdef: '" .. name .. "' is declared already, "
             .. "otherwise; the first declaration stays (a restart applies the new one)")
end

-- decl starts line lines into the text of the ffi.cdef call, which has
-- newlines newlines: a call's current line is where its text ends, so the
-- declaration's own line is that less newlines plus line.
local function apply(decl, line, newlines)
    local key = normal(decl)
    if key == "" or applied[key] then return end
    local names = names_of(key)
    for i = 1, #names do
        local before = declared[names[i]]
        if before and before ~= key then
            changed(key, names[i], line - newlines) -- (no tail call: caller counts levels)
            return
        end
    end
    local ok, err = pcall(raw_cdef, decl)
    if not ok then
        local name = type(err) == "string" and err:match("attempt to redefine '([^']*)'")
        if not name then error(shift_line(err, line), 3) end
        changed(key, name, line - newlines)
        return
    end
    applied[key] = true
    for i = 1, #names do declared[names[i]] = declared[names[i]] or key end
end

local function cdef(text)
    if type(text) ~= "string" then return raw_cdef(text) end
    local plain = strip_comments(text)
    local newlines = select(2, plain:gsub("\n", ""))
    if plain:find("^%s*#") or plain:find("\n%s*#") then
        apply(plain, 0, newlines) -- (not a tail call: the levels above count)
        return
    end
    for _, d in ipairs(declarations(plain)) do apply(d[1], d[2], newlines) end
end

-- The same fields, each of the same type.
local function same_shape(a, b)
    for k, v in pairs(a) do
        if type(b[k]) ~= type(v) then return false end
    end
    for k in pairs(b) do
        if a[k] == nil then return false end
    end
    return true
end

-- The first __index table takes the new one's fields.
local function refresh(old, new)
    for k in pairs(old) do
        if new[k] == nil then old[k] = nil end
    end
    for k, v in pairs(new) do old[k] = v end
end

local function metatype(ct, mt)
    local ctype = typeof(ct)
    local id = tonumber(ctype) or tostring(ctype)
    local first = metatables[id]
    if not first then
        local r = raw_metatype(ctype, mt)
        metatables[id] = mt
        return r
    end
    if first ~= mt then
        if type(mt) == "table" and same_shape(first, mt) then
            if type(first.__index) == "table" then
                refresh(first.__index, mt.__index)
            end
        else
            log_once("metatype " .. id, caller(1), "ffi.metatype: "
                     .. tostring(ctype) .. " has a metatable already, of "
                     .. "other fields; the first one stays")
        end
    end
    return ctype
end

ffi.cdef, ffi.metatype = cdef, metatype
-- (moonflow test's busted puts wrappers of its own in front: its specs
-- reach these through the module.)
return { cdef = cdef, metatype = metatype }
