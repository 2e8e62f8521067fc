# frozen_string_literal: true

# memtrial's Ruby probe, loaded into a run's Ruby processes through RUBYOPT=-r<this file>.
# When MEMTRIAL_RUBY_PROBE_DIR is set, one background thread appends one line every
# MEMTRIAL_PROBE_INTERVAL_MS (default 1000) to <dir>/<pid> with Ruby's own figures:
#
#   # memtrial-ruby 1\tpid=<pid>\truby=<RUBY_VERSION>\tplatform=<RUBY_PLATFORM>\tyjit=<0|1>
#   F\t<monotonic ns>\t<name>=<integer>\t...      (one per interval)
#   E\t<monotonic ns>\t<name>=<integer>\t...      (at exit)
#
# Figures: some of GC.stat (slots and pages are counts, *_bytes are bytes) and, while YJIT
# is enabled, every integer *_size / *_bytes figure of RubyVM::YJIT.runtime_stats (its
# code memory). memtrial reads the files on the run's clock (src/probe/ruby.rs).
#
# It never raises into the program, never prints, does not keep the process alive, and
# restarts its thread in a forked child (Process._fork, Ruby 3.1+). Cost: one sleeping
# thread; per interval one GC.stat into a reused hash, a few short strings, one
# open/write/close.

unless defined?(MemtrialProbe)
  module MemtrialProbe
    GC_KEYS = %i[
      heap_live_slots heap_free_slots heap_allocated_pages
      malloc_increase_bytes oldmalloc_increase_bytes
      count minor_gc_count major_gc_count
      total_allocated_objects total_freed_objects
    ].freeze

    @dir = ENV["MEMTRIAL_RUBY_PROBE_DIR"]
    @interval = [(Integer(ENV.fetch("MEMTRIAL_PROBE_INTERVAL_MS", "1000"), exception: false) || 1000), 10].max / 1000.0
    @stat = {}
    @pid = nil
    @thread = nil
    @stopped = false

    class << self
      def start
        return if @dir.nil? || @dir.empty? || @stopped

        @thread = Thread.new { run }
        @thread.name = "memtrial-probe" if @thread.respond_to?(:name=)
        @thread.report_on_exception = false
      rescue Exception # rubocop:disable Lint/RescueException
        @stopped = true
      end

      def run
        loop do
          report("F")
          sleep @interval
        end
      rescue Exception # rubocop:disable Lint/RescueException
        # Stop quietly: the program must never see the probe.
        nil
      end

      def yjit?
        defined?(RubyVM::YJIT) && RubyVM::YJIT.respond_to?(:enabled?) && RubyVM::YJIT.enabled? ? true : false
      end

      def header
        "# memtrial-ruby 1\tpid=#{Process.pid}\truby=#{RUBY_VERSION}\tplatform=#{RUBY_PLATFORM}\tyjit=#{yjit? ? 1 : 0}\n"
      end

      def figures(tag)
        line = +"#{tag}\t#{Process.clock_gettime(Process::CLOCK_MONOTONIC, :nanosecond)}"
        GC.stat(@stat)
        GC_KEYS.each do |k|
          v = @stat[k]
          line << "\t#{k}=#{v}" if v.is_a?(Integer) && v >= 0
        end
        if yjit? && RubyVM::YJIT.respond_to?(:runtime_stats)
          stats = RubyVM::YJIT.runtime_stats
          if stats.is_a?(Hash)
            stats.each do |k, v|
              name = k.to_s
              next unless v.is_a?(Integer) && v >= 0
              next unless name.end_with?("_size", "_bytes") && name.match?(/\A[a-z0-9_]+\z/)

              line << "\t#{name}=#{v}"
            end
          end
        end
        line << "\n"
      end

      # Appends one figures line (and the header first, once per process) with one write.
      def report(tag)
        return if @stopped

        pid = Process.pid
        text = figures(tag)
        text = header + text if @pid != pid
        File.open(File.join(@dir, pid.to_s), File::WRONLY | File::APPEND | File::CREAT, 0o644) do |f|
          f.syswrite(text)
        end
        @pid = pid
      rescue Exception # rubocop:disable Lint/RescueException
        @stopped = true
        nil
      end

      # In a forked child the thread is gone: start another one for the child's own file.
      def after_fork
        @thread = nil
        start
      end
    end

    # Ruby 3.1+ calls Process._fork for every fork (Kernel#fork, IO.popen("-")).
    module ForkHook
      def _fork
        pid = super
        MemtrialProbe.after_fork if pid == 0
        pid
      end
    end
  end

  begin
    Process.singleton_class.prepend(MemtrialProbe::ForkHook) if Process.respond_to?(:_fork)
    at_exit { MemtrialProbe.report("E") }
    MemtrialProbe.start
  rescue Exception # rubocop:disable Lint/RescueException
    nil
  end
end
