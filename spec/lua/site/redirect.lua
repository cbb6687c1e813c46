return function(req, resp)
    resp:redirect("/ok", 301)
end
