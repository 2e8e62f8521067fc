# frozen_string_literal: true

# memtrial's require probe, loaded into a run's Ruby processes through RUBYOPT=-r<this file>.
# When MEMTRIAL_REQUIRE_DIR is set, it wraps Kernel#require and #require_relative and
# records, for every file a require loads, the process's resident memory before and after
# (from /proc/self/statm) and the objects allocated meanwhile (GC.stat), nested requires as
# the tree. A require of a file already loaded adds its requirer to the file's "also
# required by". At exit the tree is written to <dir>/<pid> as tab-separated lines, one per
# node in depth-first order:
#
#   # memtrial-require 1\tpid=<pid>\truby=<RUBY_VERSION>\tpage=<bytes>
#   N\t<depth>\t<rss before>\t<rss after>\t<objects>\t<seconds>\t<name>\t<path>\t<gem>
#   A\t<depth of the node>\t<name of the requirer>     (also required by, after its node)
#
# rss values are bytes, objects a count (GC.stat total_allocated_objects: every object
# made while the file and what it requires loaded, less the probe's own: measured at load
# per wrapped require and per require_relative resolved, and taken out per nested call).
# Each thread's requires nest under its own thread's; the resident bytes and objects are the
# process's, so requires that overlap in time in two threads count some of each other's.
# It never raises into the program and prints nothing.

unless defined?(MemtrialRequire)
  module MemtrialRequire
    Node = Struct.new(:name, :path, :rss_before, :rss_after, :objects, :seconds, :children, :also, :nested)

    # The objects the probe itself allocates for one require it wraps (measured at load,
    # below).
    @own_objects = 0
    # The objects the probe has allocated so far by its own estimate (own_objects per
    # require wrapped, rel_objects more per require_relative resolved): what a node's
    # count holds of the probe's is this counter's growth while it loaded.
    @probe_objects = 0
    @rel_objects = 0

    @dir = ENV["MEMTRIAL_REQUIRE_DIR"]
    @root = Node.new("TOP", "", 0, 0, 0, 0.0, [], [], 0)
    @lock = Mutex.new
    @by_path = {}
    @by_name = {}
    @statm = nil
    @page = 4096
    @on = !(@dir.nil? || @dir.empty?)
    @pid = Process.pid

    class << self
      attr_reader :on

      # Resident bytes of this process (statm's second field); nil when unreadable. One
      # descriptor, read with pread (no shared position), a new string per read: threads
      # may require at once.
      def rss
        @statm ||= File.open("/proc/self/statm", "r")
        @statm.pread(127, 0).split(" ", 3)[1].to_i * @page
      rescue StandardError
        nil
      end

      # This thread's requires in progress: a require in another thread nests under its
      # own thread's, never under this one's.
      def stack
        Thread.current[:memtrial_require_stack] ||= [@root]
      end

      # How many objects wrapping one require allocates: a require of nothing, measured.
      def calibrate
        before = GC.stat(:total_allocated_objects)
        around("") { false }
        around("") { false }
        @own_objects = (GC.stat(:total_allocated_objects) - before) / 2
        before = GC.stat(:total_allocated_objects)
        2.times { resolve_relative("x", caller_locations(0, 1).first) }
        @rel_objects = (GC.stat(:total_allocated_objects) - before) / 2
        @root.children.clear
        @probe_objects = 0
        Thread.current[:memtrial_require_stack] = nil
      end

      def around(name)
        return yield unless @on && Process.pid == @pid

        before_features = $LOADED_FEATURES.size
        node = Node.new(name, nil, 0, 0, 0, 0.0, [], [], 0)
        probe_objects = (@probe_objects += @own_objects)
        stack = self.stack
        parent = stack.last
        stack.push(node)
        objects = GC.stat(:total_allocated_objects)
        t = Process.clock_gettime(Process::CLOCK_MONOTONIC)
        node.rss_before = rss
        loaded = false
        begin
          result = yield
          loaded = result
          result
        ensure
          node.rss_after = rss
          node.seconds = Process.clock_gettime(Process::CLOCK_MONOTONIC) - t
          node.objects = GC.stat(:total_allocated_objects) - objects
          node.nested = @probe_objects - probe_objects
          stack.pop
          # A statm read that failed says nothing: no growth rather than all of RSS.
          node.rss_before = node.rss_after = 0 if node.rss_before.nil? || node.rss_after.nil?
          @lock.synchronize { record(node, parent, name, loaded, before_features) }
        end
      end

      # Files a finished require loaded go under its parent (under the lock: the tree and
      # the indexes are shared by the threads).
      def record(node, parent, name, loaded, before_features)
        if loaded
          # Ruby adds a file to $LOADED_FEATURES once it has loaded, after what it required.
          node.path = $LOADED_FEATURES.size > before_features ? $LOADED_FEATURES.last : name
          parent.children << node
          @by_path[node.path] = node
          @by_name[name] = node
        else
          other = resolve(name)
          requirer = parent.equal?(@root) ? nil : parent.name
          other.also << requirer if other && requirer && !other.equal?(parent) && !other.also.include?(requirer)
          # What a require that loaded nothing required itself belongs to the parent.
          parent.children.concat(node.children)
        end
      end

      # The node of a file already loaded, by the name it was first required with or by
      # its path (a hash look-up: a large boot repeats thousands of requires).
      def resolve(name)
        @by_name[name] || @by_path[name]
      end

      # The gem a file belongs to: the loaded gem whose directory holds it ("ruby" for the
      # standard library; a vendor_ruby library by its name).
      def gem_of(path)
        return "" if path.nil?

        @gem_dirs ||= begin
          specs = defined?(Gem) && Gem.respond_to?(:loaded_specs) ? Gem.loaded_specs.values : []
          dirs = specs.map { |s| ["#{s.full_gem_path}/", s.name] }
          # A gem's compiled extensions live apart from its files.
          specs.each { |s| dirs << ["#{s.extension_dir}/", s.name] if s.respond_to?(:extension_dir) }
          lib = defined?(RbConfig) ? RbConfig::CONFIG["rubylibdir"].to_s : ""
          arch = defined?(RbConfig) ? RbConfig::CONFIG["rubyarchdir"].to_s : ""
          dirs << ["#{lib}/", "ruby"] unless lib.empty?
          dirs << ["#{arch}/", "ruby"] unless arch.empty?
          dirs
        end
        @gem_dirs.each { |dir, name| return name if path.start_with?(dir) }
        # A library a distribution installs beside Ruby's own, not as a gem (Debian's
        # vendor_ruby): named by its first directory or file there.
        vendor = path.split("/vendor_ruby/", 2)[1]
        return vendor.split("/", 2)[0].sub(/\.(rb|so)\z/, "") if vendor

        ""
      rescue StandardError
        ""
      end

      # require_relative's path: `name` against the directory of the caller's file.
      def resolve_relative(name, location)
        base = location&.absolute_path
        @probe_objects += @rel_objects
        base ? File.expand_path(name.to_s, File.dirname(base)) : name.to_s
      end

      def clean(text)
        text.to_s.tr("\t\n", "  ")
      end

      def write
        return unless @on && Process.pid == @pid

        File.open(File.join(@dir, @pid.to_s), "w") do |f|
          f.write("# memtrial-require 1\tpid=#{@pid}\truby=#{RUBY_VERSION}\tpage=#{@page}\t" \
                  "own_objects=#{@own_objects}\trel_objects=#{@rel_objects}\n")
          emit(f, @root, 0)
        end
      rescue StandardError
        nil
      end

      def emit(f, node, depth)
        unless node.equal?(@root)
          objects = [node.objects - node.nested, 0].max
          f.write("N\t#{depth}\t#{node.rss_before}\t#{node.rss_after}\t#{objects}\t" \
                  "#{format('%.6f', node.seconds)}\t#{clean(node.name)}\t#{clean(node.path)}\t" \
                  "#{clean(gem_of(node.path))}\n")
          node.also.each { |a| f.write("A\t#{depth}\t#{clean(a)}\n") }
        end
        node.children.each { |c| emit(f, c, node.equal?(@root) ? 0 : depth + 1) }
      end
    end

    module Wrap
      private

      def require(name)
        MemtrialRequire.around(name.to_s) { super }
      end

      def require_relative(name)
        full = MemtrialRequire.resolve_relative(name, caller_locations(1, 1).first)
        # The wrapper is the caller now, so the path is resolved here and loaded by the
        # require Ruby's require_relative itself uses (not rubygems', which does more).
        MemtrialRequire.around(full) { MemtrialRequire::REQUIRE.bind_call(self, full) }
      end
    end
  end

  if MemtrialRequire.on
    # Ruby's own require (rubygems keeps it as gem_original_require), which require_relative
    # loads with: the wrapped require_relative calls it with the path it resolved.
    MemtrialRequire::REQUIRE =
      if Kernel.private_method_defined?(:gem_original_require)
        Kernel.instance_method(:gem_original_require)
      else
        Kernel.instance_method(:require)
      end
    MemtrialRequire.rss
    MemtrialRequire.calibrate
    # Before Ruby 3.0 a module prepended to Kernel is not seen by classes that already
    # include Kernel (Object): prepend to Object there.
    (RUBY_VERSION >= "3.0" ? Kernel : Object).prepend(MemtrialRequire::Wrap)
    at_exit { MemtrialRequire.write }
  end
end
