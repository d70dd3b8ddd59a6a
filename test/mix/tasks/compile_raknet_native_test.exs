defmodule Mix.Tasks.Compile.RaknetNativeTest do
  # Runs cargo and replaces the library this VM has loaded, so nothing else may run meanwhile.
  use ExUnit.Case, async: false

  import ExUnit.CaptureIO

  alias Mix.Tasks.Compile.RaknetNative

  @tag timeout: 300_000
  test "--force reinstalls by rename, leaving the loaded library working" do
    installed = RaknetNative.installed_path()
    %File.Stat{inode: old_inode} = File.stat!(installed)

    {result, output} = with_io(fn -> RaknetNative.run(["--force"]) end)

    assert result == {:ok, []}, output
    assert output =~ "cargo build --release -p raknet-nif"
    # A new file took the old one's name; writing into the mapped file would crash this VM.
    assert %File.Stat{inode: new_inode} = File.stat!(installed)
    assert new_inode != old_inode
    assert RakNet.build_info().version == "0.1.0"
    assert Path.wildcard(Path.join(Path.dirname(installed), ".*.tmp")) == []
  end

  test "is a no-op when no Rust source is newer than the installed library" do
    installed = RaknetNative.installed_path()
    # Sources edited concurrently (or in the same second) would make it rebuild; date the
    # installed library a minute ahead so that only the staleness check is under test.
    %File.Stat{mtime: mtime} = File.stat!(installed, time: :posix)
    File.touch!(installed, max(mtime, System.os_time(:second)) + 60)

    try do
      assert {{:noop, []}, ""} = with_io(fn -> RaknetNative.run([]) end)
    after
      File.touch!(installed, mtime)
    end
  end
end
