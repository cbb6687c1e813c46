-- resp:file under moonflow serve, through HTTP: the handler in
-- spec/lua/site/file.lua answers its own source as a file.
local mf = require "moonflow"

local base = "http://127.0.0.1:" .. assert(os.getenv("MF_SERVE_PORT"))

local function get(path, headers)
    return mf.http.get(base .. path, { headers = headers })
end

local function source()
    local f = assert(io.open("spec/lua/site/file.lua", "rb"))
    local s = f:read("*a")
    f:close()
    return s
end

describe("resp:file", function()
    it("answers a file of the site with its validators", function()
        local r = assert(get("/file?want=200"))
        assert.are.equal(200, r.status)
        assert.are.equal(source(), r.body)
        assert.are.equal("text/x-lua", r.headers["content-type"])
        assert.are.equal("bytes", r.headers["accept-ranges"])
        assert.matches('^"%x+%-%x+"$', r.headers["etag"])
        assert.matches("GMT$", r.headers["last-modified"])
    end)

    it("answers a range with 206 and an unsatisfiable one with 416", function()
        local r = assert(get("/file?want=206", { Range = "bytes=0-1" }))
        assert.are.equal(206, r.status)
        assert.are.equal("--", r.body)
        assert.are.equal("bytes 0-1/" .. #source(), r.headers["content-range"])
        r = assert(get("/file?want=416", { Range = "bytes=999999-" }))
        assert.are.equal(416, r.status)
        assert.are.equal("bytes */" .. #source(), r.headers["content-range"])
    end)

    it("answers 304 to the ETag it gave", function()
        local r = assert(get("/file"))
        local again = assert(get("/file?want=304",
                                 { ["If-None-Match"] = r.headers["etag"] }))
        assert.are.equal(304, again.status)
        assert.are.equal("", again.body)
    end)

    it("answers 404 for a file that is not there", function()
        local r = assert(get("/file?p=nope.txt&want=404"))
        assert.are.equal(404, r.status)
    end)

    it("raises on each bad argument, naming it", function()
        local r = assert(get("/file?case=args"))
        assert.are.equal(200, r.status)
        local lines = {}
        for line in r.body:gmatch("[^\n]+") do lines[#lines + 1] = line end
        local want = {
            "^false resp:file%(path %[, opts%]%): path: a string expected",
            "^false .*path: a file path expected %(no NUL byte%)",
            "^false .*path: a file path expected %(no NUL byte%)",
            "^false resp:file%(path %[, opts%]%): opts: a table expected, got string",
            "^false resp:file: unknown option 'bogus' %(root, type%)",
            "^false resp:file: option 'type' must be a string",
            "^false resp:file: root '/none' is not a mount",
        }
        assert.are.equal(#want, #lines)
        for i, pattern in ipairs(want) do
            assert.matches(pattern, lines[i], 1, false, "line " .. i)
        end
    end)
end)
