# A stand-in for your Ruby application: loads COUNT records into memory (as a job reading
# its input, or a server at boot, would), indexes them, and prints a summary.
#
#   ruby app.rb COUNT
#
# The memory gate examples (examples/ci/github-ruby.yml, gitlab-ruby.yml) run it from the main branch and from
# the pull request, and gate the second against the first. memtrial's tests plant a
# regression by changing RECORD_BYTES in the pull request's copy (1200: +20%, 1020: +2%).

RECORD_BYTES = 1000

count = Integer(ARGV.fetch(0, "60000"))
records = Array.new(count) { |i| format("%08d:", i).ljust(RECORD_BYTES, "x") }
index = {}
records.each_with_index { |r, i| index[r[0, 8]] = i }
puts "#{records.size} records of #{RECORD_BYTES} bytes, #{index.size} keys"
