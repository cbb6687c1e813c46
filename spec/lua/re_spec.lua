-- mf.re: PCRE2 through ngx.re's shape — captures, named groups, options,
-- positions, iteration, substitution with templates and functions, empty
-- matches, errors returned (bad patterns, runaway backtracking, bad UTF-8)
-- and misuse raised.
local mf = require "moonflow"

describe("mf.re.match", function()
    it("returns the match and its groups, false for a group that took no part", function()
        local m = mf.re.match("hello 1234 world", [[(\d+)(x)?\s(?<word>\w+)]])
        assert.equals("1234 world", m[0])
        assert.equals("1234", m[1])
        assert.equals(false, m[2])
        assert.equals("world", m[3])
        assert.equals("world", m.word)
        assert.is_nil(mf.re.match("abc", [[\d]]))
    end)

    it("takes options and a start position", function()
        assert.equals("HeLLo", mf.re.match("say HeLLo", "hello", "i")[0])
        assert.is_nil(mf.re.match("say hello", "hello", "a"))
        assert.equals("b\nc", mf.re.match("a\nb\nc", "b.c", "s")[0])
        assert.equals("c", mf.re.match("ab\nc", "^c", "m")[0])
        assert.equals("b", mf.re.match("abab", "[ab]", nil, 4)[0])
        assert.is_nil(mf.re.match("ab", "a", nil, 3))
        assert.equals("é", mf.re.match("café", ".$", "u")[0])
        assert.equals("1", mf.re.match("a1", [[ \d # a digit ]], "x")[0])
    end)

    it("returns nil and PCRE2's reason for a pattern that does not compile", function()
        local m, err = mf.re.match("x", "a(")
        assert.is_nil(m)
        assert.matches('regex "a%(": missing closing parenthesis at offset 2', err)
    end)

    it("stops runaway backtracking with an error instead of spinning", function()
        local m, err = mf.re.match(("a"):rep(40) .. "!", "^(a+)+$")
        assert.is_nil(m)
        assert.matches("regex match: .*limit", err)
    end)

    it("reports invalid UTF-8 under u", function()
        local m, err = mf.re.match("\255abc", "abc", "u")
        assert.is_nil(m)
        assert.matches("regex match: UTF%-8 error", err)
    end)

    it("raises on misuse", function()
        assert.has_error(function() mf.re.match("x", "x", "q") end,
            "mf.re.match(s, re [, opts [, init]]): opts: unknown regex option 'q' (imsxuaDjo)")
        assert.has_error(function() mf.re.match(nil, "x") end)
        assert.has_error(function() mf.re.match("x", "x", nil, 0) end)
    end)
end)

describe("mf.re.find", function()
    it("gives 1-based inclusive positions of the match or of a group", function()
        assert.are.same({ 7, 10 }, { mf.re.find("hello 1234", [[\d+]]) })
        assert.are.same({ 8, 9 }, { mf.re.find("hello 1234", [[\d(\d\d)\d]], nil, 1, 1) })
        assert.is_nil(mf.re.find("hello", [[\d]]))
        assert.are.same({ 1, 0 }, { mf.re.find("abc", "") })
        assert.has_error(function() mf.re.find("a", "a", nil, 1, 2) end)
    end)
end)

describe("mf.re.gmatch", function()
    it("iterates over every match, empty ones included once each", function()
        local got = {}
        for m in mf.re.gmatch("a=1, b=22, c=333", [[(\w)=(\d+)]]) do
            got[#got + 1] = m[1] .. m[2]
        end
        assert.are.same({ "a1", "b22", "c333" }, got)
        local n = 0
        for _ in mf.re.gmatch("abc", "x*") do n = n + 1 end
        assert.equals(4, n)
    end)

    it("returns nil and the reason for a bad pattern", function()
        local it, err = mf.re.gmatch("x", "[")
        assert.is_nil(it)
        assert.matches("missing terminating ]", err)
    end)
end)

describe("mf.re.sub and gsub", function()
    it("replace with templates: $0, $N, ${N}, ${name}, $$", function()
        assert.are.same({ "[hello] world", 1 }, { mf.re.sub("hello world", [[\w+]], "[$0]") })
        assert.are.same({ "[hello] [world]", 2 }, { mf.re.gsub("hello world", [[\w+]], "[$0]") })
        assert.are.same({ "b-a $", 1 },
            { mf.re.sub("a-b", [[(?<x>\w)-(\w)]], "${2}-${x} $$") })
        assert.are.same({ "no match", 0 }, { mf.re.gsub("no match", [[\d]], "x") })
    end)

    it("replace with what a function returns for the captures", function()
        local s, n = mf.re.gsub("a1 b22", [[(\w)(\d+)]], function(m)
            return m[2] .. m[1]
        end)
        assert.equals("1a 22b", s)
        assert.equals(2, n)
        assert.has_error(function()
            mf.re.gsub("a", "a", function() return {} end)
        end, "mf.re: the replacement function returned a table (a string expected)")
    end)

    it("handle empty matches as Perl does", function()
        assert.equals("-a-b-c-", (mf.re.gsub("abc", "x*", "-")))
        assert.equals("-b--c-", (mf.re.gsub("baaac", "a*", "-")))
    end)

    it("raise on a bad template, return nil and the reason on a bad pattern", function()
        assert.has_error(function() mf.re.sub("a", "a", "$x") end)
        assert.has_error(function() mf.re.sub("a", "a", "$9") end,
            "mf.re: the replacement names group 9; the pattern has 0")
        assert.has_error(function() mf.re.sub("a", "a", "${1") end)
        local s, err = mf.re.gsub("a", "(", "x")
        assert.is_nil(s)
        assert.matches("missing closing parenthesis", err)
    end)

    it("compiles each pattern once and caches it", function()
        for i = 1, 2000 do
            assert.equals("x" .. i, mf.re.match("x" .. i, "x" .. i)[0])
        end
        collectgarbage()
        assert.equals("x1", mf.re.match("x1", "x1")[0])
    end)
end)
