local function explode()
    error("boom from a handler")
end

return function(req, resp)
    explode()
end
