return function(req, resp)
    for i = 1, 3 do
        assert(resp:write("part " .. i .. "\n"))
    end
end
