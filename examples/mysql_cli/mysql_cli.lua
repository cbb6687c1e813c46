-- A small MySQL client on moonflow:
--
--   moonflow run examples/mysql_cli/mysql_cli.lua [-u URL] [-e "SQL"]
--
-- Runs the statements of -e, or of stdin, one after another through
-- db:query, and prints their result sets as the `mariadb` client does in
-- batch mode (`mariadb -B`): a header line of column names, then one line
-- per row, values tab-separated, NULL as "NULL", and in values the bytes
-- NUL, tab, newline and backslash written as \0 \t \n \\. A statement
-- without a result set (or an empty one) prints nothing. At the first error
-- it raises "ERROR 1054 (42S22) at line N: message", N the line where the
-- statement starts: moonflow prints it on stderr and exits 1. URL defaults to $MYSQL_URL, else
-- mysql://root@127.0.0.1:3306/. A bad command line prints the usage on
-- stderr, exit status 2.
--
-- Statements end at a ';' outside quotes ('..', "..", `..`) and comments
-- (-- .., # .., /* .. */), as the mariadb client splits them; a procedure
-- that returns several result sets prints each. Not done: the client's
-- DELIMITER command and its other commands (\g, source, use ...).
local mf = require "moonflow"

-- MYSQL_TYPE_* of the integer columns: their numbers print without a point
-- (FLOAT and DOUBLE print as the server writes them: format_double).
local INTEGER = { [1] = true, [2] = true, [3] = true, [8] = true, [9] = true, [13] = true }

local escapes = { ["\0"] = "\\0", ["\t"] = "\\t", ["\n"] = "\\n", ["\\"] = "\\\\" }

-- A double the way the server writes it: the shortest digits that read
-- back as the same number, in fixed notation for exponents -15..14, else
-- as 1.25e-16 (no '+', no leading zeros in the exponent).
local function format_double(v)
    if v == 0 then return "0" end
    local s
    for p = 0, 16 do
        s = ("%." .. p .. "e"):format(v)
        if tonumber(s) == v then break end
    end
    local sign, lead, frac, exp = s:match("^(-?)(%d)%.?(%d*)e([-+]%d+)$")
    local digits = (lead .. frac):gsub("0+$", "")
    local e = tonumber(exp)
    if e < -15 or e > 14 then
        local rest = #digits > 1 and "." .. digits:sub(2) or ""
        return sign .. digits:sub(1, 1) .. rest .. "e" .. e
    end
    if e < 0 then return sign .. "0." .. ("0"):rep(-e - 1) .. digits end
    if #digits <= e + 1 then return sign .. digits .. ("0"):rep(e + 1 - #digits) end
    return sign .. digits:sub(1, e + 1) .. "." .. digits:sub(e + 2)
end

local function format_value(v, column_type)
    if v == mf.null then return "NULL" end
    if type(v) == "number" then
        if INTEGER[column_type] then return ("%.0f"):format(v) end
        return format_double(v)
    end
    return (v:gsub("[%z\t\n\\]", escapes))
end

local function print_set(set, out)
    local fields = set.fields
    if #fields == 0 or #set.rows == 0 then return end -- no set, or empty: as -B
    local line = {}
    for i, f in ipairs(fields) do line[i] = f.name end
    out[#out + 1] = table.concat(line, "\t") .. "\n"
    for _, row in ipairs(set.rows) do
        for i, f in ipairs(fields) do line[i] = format_value(row[i], f.type) end
        out[#out + 1] = table.concat(line, "\t") .. "\n"
    end
end

-- The statements of text as { sql = ..., line = N }: split at ';' outside
-- quotes and comments; N is the line of the statement's first byte that is
-- not blank or a comment.
local function split(text)
    local stmts, i, n, line = {}, 1, #text, 1
    local start, start_line
    local function finish(j)
        if start then
            stmts[#stmts + 1] = { sql = text:sub(start, j), line = start_line }
            start = nil
        end
    end
    while i <= n do
        local c = text:sub(i, i)
        local two = text:sub(i, i + 1)
        if c == "\n" then
            line = line + 1
            i = i + 1
        elseif c:match("%s") then
            i = i + 1
        elseif c == "#" or two == "--" and text:sub(i + 2, i + 2):match("^[%s]?$") then
            i = (text:find("\n", i, true) or n + 1) -- to the end of the line
        elseif two == "/*" then
            local close = text:find("*/", i + 2, true) or n - 1
            for _ in text:sub(i, close):gmatch("\n") do line = line + 1 end
            i = close + 2
        elseif c == ";" then
            finish(i - 1)
            i = i + 1
        else
            if not start then start, start_line = i, line end
            if c == "'" or c == '"' or c == "`" then
                local j = i + 1
                while j <= n do
                    local d = text:sub(j, j)
                    if d == "\\" and c ~= "`" then
                        j = j + 1
                    elseif d == c then
                        if text:sub(j + 1, j + 1) ~= c then break end
                        j = j + 1
                    end
                    j = j + 1
                end
                for _ in text:sub(i, j):gmatch("\n") do line = line + 1 end
                i = j + 1
            else
                i = i + 1
            end
        end
    end
    finish(n)
    return stmts
end

-- The URL and the SQL (nil: stdin); nil, nil for a bad command line.
local function parse_args(argv)
    local url, sql = os.getenv("MYSQL_URL") or "mysql://root@127.0.0.1:3306/", nil
    local i = 1
    while argv[i] do
        local a, v = argv[i], argv[i + 1]
        if a == "-u" and v then
            url = v
        elseif a == "-e" and v then
            sql = v
        else
            return nil
        end
        i = i + 2
    end
    return url, sql
end

local url, sql = parse_args(arg)
if not url then
    io.stderr:write("usage: moonflow run examples/mysql_cli/mysql_cli.lua",
        " [-u mysql://user:pass@host:port/db] [-e SQL]\n")
    return 2 -- the main chunk's number is moonflow's exit status
end
local db = mf.mysql(url, { rows = "array" })
for _, stmt in ipairs(split(sql or io.read("*a"))) do
    local res, err = db:query(stmt.sql)
    if not res then
        -- Raised, as a `moonflow run` script fails: moonflow prints it on
        -- stderr after "moonflow: " and exits 1.
        local code, state, msg = tostring(err):match("^mysql (%d+) (%w+): (.*)$")
        if code then
            error(("ERROR %s (%s) at line %d: %s"):format(code, state, stmt.line, msg), 0)
        end
        error(("ERROR at line %d: %s"):format(stmt.line, tostring(err)), 0)
    end
    local out = {}
    for _, set in ipairs(res.sets or { res }) do print_set(set, out) end
    io.write(table.concat(out))
end
